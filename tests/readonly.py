"""A folder nobody can write to, root included (the suite runs as root in CI, where permission bits stop nothing)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """`folder` (and everything under it) read-only while the block runs: as root, a read-only bind mount of it
    onto itself (writes fail with EROFS, whoever asks); otherwise its folders' write bits removed (EACCES).
    Skipped only for root without mount rights (CI has them: `.ci/run` fails a row whose test was skipped)."""
    folder = Path(folder)
    if os.geteuid() != 0:
        folders = [folder, *(p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink())]
        modes = {p: p.stat().st_mode for p in folders}
        for path in folders:
            path.chmod(0o555)
        try:
            yield folder
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    made = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"root without mount rights (no read-only folder possible): {made.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)
