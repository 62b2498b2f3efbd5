"""`beir-harness env`: the block a user pastes into a bug report.

Versions, the host (CPU, kernel flags), what torch sees (CUDA devices, MPS), and the folders the
harness actually uses — data, cache, results — with the installed datasets and the cache size.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from harness.datasets.catalog import data_dir, list_datasets
from harness.host import host_info, versions
from harness.io.cache import cache_dir, list_entries
from harness.presentation import align
from harness.runtimes.registry import TORCH

logger = logging.getLogger(__name__)


def torch_devices() -> dict[str, Any]:
    """What torch can run on: CUDA devices (name, memory), MPS, and its CPU threads."""
    if importlib.util.find_spec("torch") is None:
        return {"torch": "not installed"}
    import torch

    cuda = (
        [
            {
                "index": i,
                "name": torch.cuda.get_device_name(i),
                "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
            }
            for i in range(torch.cuda.device_count())
        ]
        if torch.cuda.is_available()
        else []
    )
    mps = getattr(torch.backends, "mps", None)
    return {
        "cuda": cuda,
        "cuda_version": torch.version.cuda,
        "mps": bool(mps and mps.is_available()),
        "cpu_threads": torch.get_num_threads(),
    }


def _folder_size(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file()) if root.is_dir() else 0


def describe(
    data: str | Path | None = None, cache: str | Path | None = None, results: str | Path = "results"
) -> dict[str, Any]:
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
            "data": str(data_root.resolve()),
            "cache": str(cache_root.resolve()),
            "results": str(results_root.resolve()),
        },
        "installed_datasets": installed,
        "cache": {
            "entries": len(entries),
            "complete": sum(e["complete"] for e in entries),
            "bytes": _folder_size(cache_root),
        },
        "results": len(list(results_root.glob("*/*/*.json"))) if results_root.is_dir() else 0,
    }


def format_environment(info: dict[str, Any]) -> str:
    """The plain-text block: one ``key: value`` line per fact, grouped."""
    host, devices, folders = info["host"], info["devices"], info["folders"]
    cuda = devices.get("cuda") or []
    lines = [f"{name}: {version}" for name, version in info["versions"].items()]
    lines += [
        f"cpu: {host['cpu']} ({host['machine']}, {host['logical_cores']} logical cores, {host['cores_used']} usable)",
        f"cpu kernels: {host['kernel_class']} ({' '.join(host['cpu_flags']) or 'none of the tracked flags'})",
        f"os: {host['os']}",
        "cuda: "
        + (
            "; ".join(f"cuda:{d['index']} {d['name']} ({d['memory_gib']} GiB)" for d in cuda)
            + f" (CUDA {devices.get('cuda_version')})"
            if cuda
            else "none"
        ),
        f"mps: {'available' if devices.get('mps') else 'no'}",
        f"data dir: {folders['data']}",
        f"installed datasets: {', '.join(info['installed_datasets']) or 'none'}",
        f"cache dir: {folders['cache']} ({info['cache']['entries']} entries, {info['cache']['bytes'] / 2**20:.1f} MB)",
        f"results dir: {folders['results']} ({info['results']} result files)",
    ]
    return "\n".join(lines)


def _sample_texts(count: int, dataset: str | Path | None) -> list[str]:
    """`count` document texts: the first of `dataset`'s corpus, else the bundled demo's, repeated."""
    from itertools import cycle, islice

    from harness.io.formats import find_file, iter_corpus
    from harness.records import doc_text

    if dataset is not None:
        corpus = find_file(Path(dataset) / "corpus.jsonl") or Path(dataset) / "corpus.jsonl"
        return [doc_text(doc) for doc in islice(iter_corpus(corpus), count)]
    from harness.pipeline.demo import demo_folder

    texts = [doc_text(doc) for doc in iter_corpus(demo_folder() / "corpus.jsonl")]
    return list(islice(cycle(texts), count))


def _runtime_encoders(torch_encoder: Any, sample: list[str], cache: Path) -> dict[str, Any]:
    """Every runtime of the registry around `torch_encoder`, an extra's runtimes together when all they need is
    installed (a calibrated one calibrated on the sample itself), in the registry's order."""
    from harness.io.cache import content_key
    from harness.records import Doc
    from harness.runtimes.openvino_backend import CALIBRATION_TEXTS, corpus_calibration
    from harness.runtimes.registry import RUNTIMES

    encoders: dict[str, Any] = {}
    extras = dict.fromkeys(record.extra for record in RUNTIMES if record.build is not None)
    for extra in extras:
        members = [record for record in RUNTIMES if record.build is not None and record.extra == extra]
        needs = dict.fromkeys(module for record in members for module in record.needs)
        if any(importlib.util.find_spec(module) is None for module in needs):
            logger.info(
                "%s %s not installed: the %s backends are not measured (pip install 'beir-harness[%s]')",
                "/".join(needs),
                "is" if len(needs) == 1 else "are",
                extra,
                extra,
            )
            continue
        for record in members:
            calibration = None
            if record.calibrated:  # on the sample itself: a short sample is no fault here
                docs = [Doc(str(i), "", text) for i, text in enumerate(sample)]
                calibration = corpus_calibration(
                    iter(docs), content_key({"bench sample": sample}), size=min(CALIBRATION_TEXTS, len(sample))
                )
            encoders[record.name] = record.wrap(torch_encoder, cache, calibration)
            if hasattr(encoders[record.name], "inference_precision"):
                logger.info("%s: inference precision %s here", record.name, encoders[record.name].inference_precision)
    return encoders


def bench_backends(
    model: str | None = None,
    texts: int = 256,
    dataset: str | Path | None = None,
    cache: str | Path | None = None,
    rounds: int = 2,
    batch_size: int = 32,
) -> list[dict[str, Any]]:
    """Encode one sample with every available backend here; docs/s and closeness to torch fp32.

    Backends are alternated round by round (so a slow-down of the machine hits all of them), each
    after one warm-up batch. Closeness is the cosine of each vector to torch fp32's.

    Args:
        model: The model (default: the default model).
        texts: How many document texts to encode.
        dataset: A BEIR folder to take them from (default: the bundled demo corpus, repeated).
        cache: The cache dir (where ONNX exports are kept).
        rounds: Timed passes over the sample per backend.
        batch_size: Texts per forward pass.

    Returns:
        One row per backend: ``backend``, ``docs_per_s``, ``vs_torch`` (speed ratio),
        ``cosine_mean`` and ``cosine_min`` to torch fp32, ``precision`` (of its products: fp32, bf16 or int8) and
        ``gflops`` (the transformer's operations on the sample per second, `harness.host.transformer_flops`; None
        for a model without a BERT-style configuration), which `harness.host.gemm_share` sets against the host's
        matrix-multiply rate.
    """
    from harness.retrieval.encode import load_encoder
    from harness.retrieval.models import DEFAULT_MODEL

    sample = _sample_texts(texts, dataset)
    torch_encoder = load_encoder(model or DEFAULT_MODEL, batch_size=batch_size)
    encoders: dict[str, Any] = {TORCH: torch_encoder}
    encoders.update(_runtime_encoders(torch_encoder, sample, cache_dir(cache)))
    encoders[f"{TORCH} bf16"] = load_encoder(
        model or DEFAULT_MODEL, batch_size=batch_size, device="cpu", precision="bf16"
    )
    from harness.runtimes.auto import measure

    rows = measure(encoders, sample, rounds=rounds, batch_size=batch_size)
    flops = _flops_per_text(torch_encoder, sample)
    for row in rows:
        row["precision"] = _product_precision(row["backend"], encoders[row["backend"]])
        row["gflops"] = row["docs_per_s"] * flops / 1e9 if flops else None
    return rows


def _flops_per_text(encoder: Any, sample: list[str]) -> float | None:
    """The mean `harness.host.transformer_flops` of the sample's texts as the model tokenizes and truncates them;
    None for a model without a BERT-style configuration (hidden size, layers, feed-forward size)."""
    from harness.host import transformer_flops

    model = getattr(encoder, "model", None)
    config = getattr(getattr(model[0], "auto_model", None), "config", None) if model is not None else None
    sizes = [getattr(config, name, None) for name in ("hidden_size", "num_hidden_layers", "intermediate_size")]
    if None in sizes or not hasattr(encoder, "token_lengths") or not sample:
        return None
    return sum(transformer_flops(tokens, *sizes) for tokens in encoder.token_lengths(sample)) / len(sample)


def _product_precision(name: str, encoder: Any) -> str:
    """The precision a backend's products run in, as `harness.host.gemm_probe` names them: int8 for a runtime with
    int8 products (its registry record), bf16 for an encoder loaded in bf16 (torch bf16) or whose inference
    precision is bf16 (OpenVINO on a CPU with it), else fp32."""
    from harness.runtimes.registry import BY_NAME

    record = BY_NAME.get(name)
    if record is not None and record.int8_products:
        return "int8"
    loaded = getattr(encoder, "precision", "fp32")
    return "bf16" if "bf16" in (loaded, getattr(encoder, "inference_precision", None)) else "fp32"


def format_bench(rows: list[dict[str, Any]], host: dict[str, Any], texts: int) -> str:
    """The backend table, headed by the machine it was measured on."""
    lines = [
        f"measured on {host['cpu']} ({host['kernel_class']}: {' '.join(host['cpu_flags'])}; "
        f"{host['cores_used']} cores), {texts} texts"
    ]
    table = [["backend", "docs/s", "vs torch", "cosine to torch fp32 (mean / min)", "GOP/s", "of the GEMM rate"]]
    table += [
        [
            row["backend"],
            f"{row['docs_per_s']:.1f}",
            f"{row['vs_torch']:.2f}x",
            f"{row['cosine_mean']:.4f} / {row['cosine_min']:.4f}",
            f"{row['gflops']:.1f}" if row.get("gflops") is not None else "-",
            f"{row['share_of_gemm']:.0%} of {row['precision']}" if "share_of_gemm" in row else "-",
        ]
        for row in rows
    ]
    lines += align(table, right=[False, True, True, True, True, True])
    fastest = max(rows, key=lambda row: row["docs_per_s"])
    lines.append(f"fastest here: {fastest['backend']}")
    lines.append(f"--backend auto would pick: {_auto_pick(rows, host)}")
    return "\n".join(lines)


def _auto_pick(rows: list[dict[str, Any]], host: dict[str, Any]) -> str:
    """What ``--backend auto`` would make of these rows on this host: on a class the CPU class table lists, its pick
    among the backends measured here (`harness.runtimes.auto.table_pick`), kept if these rows confirm it against
    torch fp32 as auto's confirmation would; on another class, the probe's rule (`choose`) over its candidates
    (torch bf16 only where native)."""
    from harness.runtimes.auto import EXCLUDED, REFERENCE, Candidate, choose, native_bf16, table_pick
    from harness.runtimes.classes import class_rows

    table = class_rows(host["kernel_class"])
    if table:
        measured = {row["backend"]: row for row in rows}
        best = table_pick(table, measured)
        source = f"the CPU class table's pick for {host['kernel_class']}"
        if best is None or best.candidate == REFERENCE.name or REFERENCE.name not in measured:
            return f"{REFERENCE.name} ({source}: {REFERENCE.name})"
        pick = Candidate(*best.candidate.split(" "))
        choice = choose([measured[REFERENCE.name], measured[pick.name]], [REFERENCE, pick])
        verdict = "confirmed by these rows" if choice["picked"] == pick.name else "not confirmed by these rows"
        return f"{choice['picked']} ({source}, {pick.name}, {verdict}: {choice['reason']})"
    usable = [
        row
        for row in rows
        if row["backend"] not in EXCLUDED
        and (row["backend"] != Candidate(TORCH, "bf16").name or native_bf16(host["cpu_flags"]))
    ]
    choice = choose(usable, [Candidate(*row["backend"].split(" ")) for row in usable])
    return f"{choice['picked']} (the probe's rule, {host['kernel_class']} is not in the CPU class table: {choice['reason']})"


def format_gemm(probe: dict[str, Any]) -> str:
    """The matrix-multiply probe (`harness.host.gemm_probe`): one line per precision, then those skipped."""
    queries, dim, docs = probe["shape"]
    lines = [f"matrix multiply, {queries} queries x {dim} dims by {docs} documents (a search's shape):"]
    table = [["precision", "rate", "library"]]
    table += [
        [row["precision"], f"{row['gflops']:.1f} {'GOP' if row['precision'] == 'int8' else 'GFLOP'}/s", row["library"]]
        for row in probe["rates"]
    ]
    lines += align(table, right=[False, True, False])
    lines += [f"{precision}: not measured ({why})" for precision, why in probe["skipped"].items()]
    return "\n".join(lines)
