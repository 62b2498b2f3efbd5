"""Looking after the store: what it holds (`list_entries`, `cache_usage`), removing it (`clear_entries`,
`prune_cache`), and the shared locks a run holds on what it reads (`reading`), which both respect.

One walk of the store (`_units`) serves the listing, the clear and the prune: a corpus (or query) entry under
``embeddings/`` is one unit, and so is each segment of a namespace under ``texts/`` and each file under ``indexes/``
(an approximate index, int8 ranges)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.io.files import HeldLock, hold_lock, remove_stale_temporaries

logger = logging.getLogger(__name__)


def check_removable(root: Path, folders: Iterable[Path]) -> None:
    """Before anything is removed from the cache `root`: each of `folders` that exists must be writable.

    Raises:
        HarnessError: One is on a read-only file system or not writable: one line naming it (nothing removed).
    """
    for folder in folders:
        if folder.is_dir() and not os.access(folder, os.W_OK):
            folder = root if not os.access(root, os.W_OK) else folder  # the whole cache, where it is
            read_only = hasattr(os, "statvfs") and os.statvfs(folder).f_flag & os.ST_RDONLY
            why = "is read-only" if read_only else "is not writable (permission denied)"
            where = "" if folder == root else f" {root}"
            raise HarnessError(f"{folder} {why}: nothing was removed from the cache{where} (make it writable first)")


def remove_tree(path: str | Path, root: Path) -> None:
    """Remove a cache folder (one removed meanwhile by another process is fine).

    Raises:
        HarnessError: It cannot be removed (read-only, permissions): one line naming the file.
    """
    path = Path(path)
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        if path.exists():  # a file inside went meanwhile: the rest still goes
            remove_tree(path, root)
    except OSError as exc:
        raise HarnessError(
            f"cannot remove cached files from {root}: {exc.filename or path}: {exc.strerror or exc}"
        ) from None


def _json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _namespace_model(namespace: Path) -> str | None:
    return (_json(namespace / "inputs.json").get("inputs", {}).get("model") or {}).get("name")


def _units(root: Path) -> list[dict[str, Any]]:
    """Every unit of the store, oldest use first: a corpus or query entry (``kind`` ``entry``, with the key,
    model, dataset, kind of vectors, rows and whether it is complete) or a text segment (``kind`` ``texts``,
    with its namespace's model and its files); each with its bytes and last use."""
    units = []
    for namespace in sorted(p for p in (root / "texts").glob("*") if p.is_dir()):
        model = _namespace_model(namespace)
        for manifest in sorted(namespace.glob("*.json")):
            if manifest.name != "inputs.json":
                parts = ("keys", "meta", "vectors", "offsets")
                files = [manifest, *(namespace / f"{manifest.stem}.{part}.npy" for part in parts)]
                size = sum(f.stat().st_size for f in files if f.is_file())
                units.append(
                    {
                        "kind": "texts",
                        "path": namespace,
                        "files": files,
                        "bytes": size,
                        "used": manifest,
                        "model": model,
                    }
                )
    for entry in sorted(p for p in (root / "embeddings").glob("*") if p.is_dir()):
        key, manifest = _json(entry / "key.json"), entry / "manifest.json"
        inputs = key.get("inputs", {})
        units.append(
            {
                "kind": "entry",
                "path": entry,
                "files": [],
                "bytes": _folder_bytes(entry),
                "used": manifest if manifest.is_file() else entry / "key.json",
                "model": (inputs.get("model") or {}).get("name"),
                "dataset": key.get("labels", {}).get("dataset"),
                "vectors": inputs.get("kind"),
                "rows": _json(manifest).get("rows") if manifest.is_file() else None,
                "complete": manifest.is_file(),
                "store": key.get("store"),  # the namespace under texts/ its vectors are in
            }
        )
    for index in sorted(p for p in (root / "indexes").glob("*") if p.is_file()):
        units.append({"kind": "index", "path": index, "files": [index], "bytes": index.stat().st_size, "used": index})
    for unit in units:
        try:
            unit["mtime"] = unit["used"].stat().st_mtime
        except OSError:
            unit["mtime"] = 0.0
    return sorted(units, key=lambda unit: unit["mtime"])


def list_entries(root: Path) -> list[dict[str, Any]]:
    """Every corpus and query entry: key, model, dataset, kind, rows, bytes, complete?, path."""
    entries = [unit for unit in _units(root) if unit["kind"] == "entry"]
    return [
        {
            "key": unit["path"].name,
            "model": unit["model"],
            "dataset": unit["dataset"],
            "kind": unit["vectors"],
            "rows": unit["rows"],
            "bytes": unit["bytes"],
            "complete": unit["complete"],
            "path": str(unit["path"]),
        }
        for unit in sorted(entries, key=lambda unit: unit["path"].name)
    ]


def clear_entries(
    root: Path, model: str | None = None, dataset: str | None = None, dry_run: bool = False
) -> list[dict[str, Any]]:
    """Delete the entries matching `model` and `dataset` (all when both are None); without `dataset`, also the
    vectors by text of `model` (of every model without it); without either, also the cached indexes.

    Args:
        root: The cache root.
        model: Only entries of this model (the name entries record: the canonical model name).
        dataset: Only entries of this dataset.
        dry_run: Delete nothing; return what would be deleted.

    Returns:
        The entries deleted (or, with `dry_run`, those that would be).

    Raises:
        HarnessError: A filter matches no entry; the message lists the models and datasets that
            do have entries.
    """
    entries = list_entries(root)
    chosen = [e for e in entries if model in (None, e["model"]) and dataset in (None, e["dataset"])]
    if not chosen and (model is not None or dataset is not None):
        wanted = " and ".join(
            f"{what} {value!r}" for what, value in (("model", model), ("dataset", dataset)) if value is not None
        )
        if not entries:
            raise HarnessError(f"no cache entry matches {wanted}: the cache {root} is empty")
        models = sorted({str(entry["model"]) for entry in entries})
        datasets = sorted({str(entry["dataset"]) for entry in entries})
        raise HarnessError(
            f"no cache entry in {root} matches {wanted}; entries exist for models "
            f"{', '.join(models)} and datasets {', '.join(datasets)}"
        )
    if not dry_run:
        texts = sorted(p for p in (root / "texts").glob("*") if p.is_dir()) if dataset is None else []
        check_removable(
            root, [root / "embeddings", root / "indexes", *(Path(entry["path"]) for entry in chosen), *texts]
        )
        for entry in chosen:
            remove_tree(entry["path"], root)
        if dataset is None:
            for namespace in texts:
                if model is None or _namespace_model(namespace) == model:
                    remove_tree(namespace, root)
        if model is None and dataset is None and (root / "indexes").is_dir():
            remove_tree(root / "indexes", root)  # keyed by the entries: none is left
    return chosen


def cache_usage(root: Path) -> dict[str, int]:
    """Bytes on disk per top-level folder of the cache (``embeddings``, ``texts``, ``models``, ...) and ``total``."""
    usage: dict[str, int] = {}
    if root.is_dir():
        for child in sorted(root.iterdir()):
            usage[child.name] = _folder_bytes(child) if child.is_dir() else child.stat().st_size
    usage["total"] = sum(usage.values())
    return usage


# --- locks held while a run reads, and pruning around them


@contextlib.contextmanager
def reading(paths: Sequence[Path | None]) -> Iterator[None]:
    """Hold a shared lock on each of `paths` (a text namespace or a corpus entry folder) while a run reads
    them: `prune_cache` skips a locked one. Where shared locks are not available (no fcntl), nothing is held."""
    with contextlib.ExitStack() as stack:
        for path in paths:
            if path is not None:
                lock = _lock(path, shared=True)
                if lock is not None:
                    stack.callback(lock.release)
        yield


def _lock_path(path: Path) -> Path:
    """``<cache>/locks/<folder>-<name>.lock`` for ``<cache>/<folder>/<name>`` (beside nothing a listing reads)."""
    return path.parent.parent / "locks" / f"{path.parent.name}-{path.name}.lock"


def _lock(path: Path, shared: bool, wait: bool = True) -> HeldLock | None:
    """The lock on `path` (`harness.io.files.hold_lock`: shared or exclusive; without `wait`, None when taken),
    or None where none can be had (an unwritable cache, no shared locks)."""
    try:
        return hold_lock(_lock_path(path), shared=shared, wait=wait)
    except OSError:
        return None


def prune_cache(
    root: Path, older_than_s: float | None = None, max_bytes: int | None = None, dry_run: bool = False
) -> list[dict[str, Any]]:
    """Remove text segments, corpus/query entries and cached indexes unused for `older_than_s`, then the least
    recently used until ``embeddings/``, ``texts/`` and ``indexes/`` hold at most `max_bytes`, then the entries whose
    vectors went with a segment; whatever a run holds (`reading`) stays.

    Returns:
        What was removed (or, with `dry_run`, would be): kind, path, bytes, last use (epoch seconds).
    """
    units = _units(root)
    if not dry_run and units:  # a read-only cache: one line naming it, before anything goes
        check_removable(
            root, [root / "locks", *{unit["path"].parent: None for unit in units}, *(u["path"] for u in units)]
        )
    total, now, removed, emptied = sum(unit["bytes"] for unit in units), time.time(), [], set()
    for unit in units + [unit for unit in units if unit["kind"] == "entry"]:  # entries again: lost their vectors?
        old = older_than_s is not None and now - unit["mtime"] > older_than_s
        large = max_bytes is not None and total > max_bytes
        if unit.get("removed") or not (old or large or unit.get("store") in emptied):
            continue
        if dry_run or _remove(unit):
            total -= unit["bytes"]
            unit["removed"] = True
            emptied.add(unit["path"].name if unit["kind"] == "texts" else None)
            removed.append({"kind": unit["kind"], "path": str(unit["path"]), "bytes": unit["bytes"]})
            removed[-1]["last_used"] = unit["mtime"]
    return removed


def _remove(unit: dict[str, Any]) -> bool:
    """Remove one unit unless a run holds it; a segment's manifest goes first (no reader opens it after)."""
    lock = _lock(unit["path"], shared=False, wait=False)
    if lock is None and _lock_path(unit["path"]).exists():
        logger.info("in use, kept: %s", unit["path"])
        return False
    try:
        if unit["kind"] != "entry":
            for path in unit["files"]:
                path.unlink(missing_ok=True)
        else:
            (unit["path"] / "manifest.json").unlink(missing_ok=True)
            remove_tree(unit["path"], unit["path"].parent.parent)
        if lock is not None and unit["kind"] != "texts":
            lock.release(remove=True)  # the entry's (index's) lock file goes with it
        remove_stale_temporaries(unit["path"] if unit["kind"] == "texts" else unit["path"].parent)
    except OSError as exc:
        raise HarnessError(
            f"cannot remove cached files: {exc.filename or unit['path']}: {exc.strerror or exc}"
        ) from None
    finally:
        if lock is not None:
            lock.release()
    return True


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """Seconds of ``30d``, ``12h``, ``90m``, ``45s`` or ``2w``.

    Raises:
        ValueError: Anything else (the message shows the accepted forms).
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if not match:
        raise ValueError(f"{text!r} is not a duration: use a number and one of s, m, h, d, w (e.g. 30d, 12h)")
    return float(match.group(1)) * _UNITS[match.group(2)]
