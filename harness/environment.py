"""`beir-harness env`: the block a user pastes into a bug report.

Versions, the host (CPU, kernel flags), what torch sees (CUDA devices, MPS), and the folders the
harness actually uses — data, cache, results — with the installed datasets and the cache size.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from harness.cache import cache_dir, list_entries
from harness.datasets import data_dir, list_datasets
from harness.host import host_info, versions

logger = logging.getLogger(__name__)


def torch_devices() -> dict[str, Any]:
    """What torch can run on: CUDA devices (name, memory), MPS, and its CPU threads."""
    if importlib.util.find_spec("torch") is None:
        return {"torch": "not installed"}
    import torch

    cuda = [{"index": i, "name": torch.cuda.get_device_name(i),
             "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)}
            for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    mps = getattr(torch.backends, "mps", None)
    return {"cuda": cuda, "cuda_version": torch.version.cuda, "mps": bool(mps and mps.is_available()),
            "cpu_threads": torch.get_num_threads()}


def _folder_size(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file()) if root.is_dir() else 0


def describe(data: str | Path | None = None, cache: str | Path | None = None,
             results: str | Path = "results") -> dict[str, Any]:
    """Everything `beir-harness env` shows, as a JSON-ready dict.

    Args:
        data: The data dir option (None: ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``).
        cache: The cache dir option (None: ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder).
        results: The results folder.
    """
    data_root, cache_root, results_root = data_dir(data), cache_dir(cache), Path(results)
    entries = list_entries(cache_root)
    installed = [row["name"] for row in list_datasets(data_root) if row["installed"]]
    return {
        "versions": versions(),
        "host": host_info(),
        "devices": torch_devices(),
        "folders": {
            "data": str(data_root.resolve()), "cache": str(cache_root.resolve()),
            "results": str(results_root.resolve()),
        },
        "installed_datasets": installed,
        "cache": {"entries": len(entries), "complete": sum(e["complete"] for e in entries),
                  "bytes": _folder_size(cache_root)},
        "results": len(list(results_root.glob("*/*/*.json"))) if results_root.is_dir() else 0,
    }


def format_environment(info: dict[str, Any]) -> str:
    """The plain-text block: one ``key: value`` line per fact, grouped."""
    host, devices, folders = info["host"], info["devices"], info["folders"]
    cuda = devices.get("cuda") or []
    lines = [f"{name}: {version}" for name, version in info["versions"].items()]
    lines += [
        f"cpu: {host['cpu']} ({host['machine']}, {host['logical_cores']} logical cores, "
        f"{host['cores_used']} usable)",
        f"cpu kernels: {host['kernel_class']} ({' '.join(host['cpu_flags']) or 'none of the tracked flags'})",
        f"os: {host['os']}",
        "cuda: " + ("; ".join(f"cuda:{d['index']} {d['name']} ({d['memory_gib']} GiB)" for d in cuda)
                    + f" (CUDA {devices.get('cuda_version')})" if cuda else "none"),
        f"mps: {'available' if devices.get('mps') else 'no'}",
        f"data dir: {folders['data']}",
        f"installed datasets: {', '.join(info['installed_datasets']) or 'none'}",
        f"cache dir: {folders['cache']} ({info['cache']['entries']} entries, "
        f"{info['cache']['bytes'] / 2**20:.1f} MB)",
        f"results dir: {folders['results']} ({info['results']} result files)",
    ]
    return "\n".join(lines)
