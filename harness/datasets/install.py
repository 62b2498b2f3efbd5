"""The install primitives every way into the data dir uses (`harness.datasets.catalog`: BEIR's zips and folders;
`harness.datasets.nanobeir`: NanoBEIR's parquet files): where the data dir and the mirror are, the stamp that
marks a folder installed, the per-dataset lock, the record of an install, the clock the stamp records.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.io.files import hold_lock

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/"
STAMP = ".beir-harness.json"


def data_dir(option: str | Path | None = None) -> Path:
    """The data dir: the option, else ``$BEIR_HARNESS_DATA_DIR``, else ``./datasets``."""
    return Path(option or os.environ.get("BEIR_HARNESS_DATA_DIR") or "datasets")


def base_url(option: str | None = None) -> str:
    """The download base URL: the option, else ``$BEIR_HARNESS_MIRROR``, else BEIR's server."""
    url = option or os.environ.get("BEIR_HARNESS_MIRROR") or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


def read_stamp(folder: Path) -> dict[str, Any] | None:
    """The stamp of an installed dataset folder, or None when it is not (completely) installed."""
    try:
        return json.loads((folder / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def data_root(root: Path) -> Iterator[Path]:
    """Make the data dir (and its missing parents); when what runs inside fails, remove those of them that it
    made and left empty, so a failed download or import leaves no empty folder behind."""
    made = [folder for folder in (root, *root.parents) if not folder.exists()]
    root.mkdir(parents=True, exist_ok=True)
    try:
        yield root
    except BaseException:
        for folder in made:  # deepest first
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break
        raise


@contextlib.contextmanager
def locked(root: Path, name: str) -> Iterator[None]:
    """Hold ``<root>/.locks/<name>.lock`` exclusively (`harness.io.files.hold_lock`); the file (and an empty
    ``.locks``) is removed on release: a process that waited on the file just removed finds it gone and locks
    the one at the path, so two processes never both hold the dataset.
    """
    locks = root / ".locks"
    lock = hold_lock(
        locks / f"{name}.lock", waiting=lambda: logger.info("%s: another process is working on it; waiting", name)
    )
    try:
        yield
    finally:
        if lock is not None:  # always, waiting for an exclusive lock
            lock.release(remove=True)
        with contextlib.suppress(OSError):
            locks.rmdir()  # only when empty


@dataclass(frozen=True)
class Installed:
    """A dataset folder in the data dir and its stamp."""

    name: str
    path: Path
    stamp: dict[str, Any]


def now() -> str:
    """The time an install is stamped with: UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
