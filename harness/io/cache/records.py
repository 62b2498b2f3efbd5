"""Small JSON records the store keeps beside the vectors: remembered model fingerprints (``models/``, so a warm
rerun loads no model) and records keyed by their inputs (``<kind>/<key[:2]>/<key>.json``: LLM judgments...)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import OutputError
from harness.io.cache.entries import CACHE_FORMAT, content_key
from harness.io.files import write_json

logger = logging.getLogger(__name__)


def model_files_key(source: str, settings: Mapping[str, Any]) -> str | None:
    """A cheap key for a model as it lies on disk: its files' names, sizes and mtimes, plus `settings`.

    Works for a local model folder, or a hub id already in the Hugging Face cache; None otherwise.
    Used to remember a model's (expensive) weight fingerprint between runs, so that a run whose
    embeddings are all cached needs no model at all.
    """
    folder = Path(source)
    if source.startswith("hash:"):
        return None  # the hashing stand-in has no files and costs nothing to "load"
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(source, local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached, not a hub id, or no huggingface_hub: no shortcut
            return None
    entries = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        entries.append([path.relative_to(folder).as_posix(), stat.st_size, stat.st_mtime_ns])
    if not entries:
        return None
    return content_key({"folder": str(folder.resolve()), "files": entries, "settings": dict(settings)})


def recall_fingerprint(root: Path, key: str) -> dict[str, Any] | None:
    """A model fingerprint remembered under `key`, or None."""
    try:
        return json.loads((root / "models" / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def remember_fingerprint(root: Path, key: str, fingerprint: Mapping[str, Any]) -> None:
    """Remember a model fingerprint (best effort: an unwritable cache only costs the shortcut)."""
    try:
        write_json(dict(fingerprint), root / "models" / f"{key}.json")
    except OutputError as exc:
        logger.debug("cannot remember the model fingerprint: %s", exc)


def record_path(root: Path, kind: str, inputs: Mapping[str, Any]) -> Path:
    """Where a small JSON record keyed by `inputs` lives: ``<root>/<kind>/<key[:2]>/<key>.json``."""
    key = content_key(inputs)
    return root / kind / key[:2] / f"{key}.json"


def recall_record(root: Path, kind: str, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record stored for `inputs` (`remember_record`), or None: missing, unreadable, or stored for other
    inputs (its own copy of the inputs must match, so a damaged or foreign file is never taken)."""
    try:
        record = json.loads(record_path(root, kind, inputs).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("inputs") != json.loads(json.dumps(dict(inputs))):
        return None
    return record.get("value")


def remember_record(root: Path, kind: str, inputs: Mapping[str, Any], value: Mapping[str, Any]) -> bool:
    """Store `value` for `inputs`, atomically (a reader sees the whole record or none); best effort: an
    unwritable cache logs a warning and returns False."""
    try:
        write_json(
            {"format": CACHE_FORMAT, "inputs": dict(inputs), "value": dict(value)}, record_path(root, kind, inputs)
        )
    except OutputError as exc:
        logger.warning("cache %s is not writable (%s); continuing without caching", root / kind, exc)
        return False
    return True
