"""Writing derived files safely: atomic writes (a temporary sibling, flushed, fsynced and renamed over the target,
so a crash never leaves a half file that looks complete), private temporary folders, the removal of what a killed
writer left, and the permissions every written file gets."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from glob import escape as glob_escape
from pathlib import Path
from typing import IO, Any

from harness.errors import OutputError


def default_permissions(path: str | Path, folder: bool = False) -> None:
    """Give a file made by mkstemp/mkdtemp (0600/0700) the permissions a plain open() would."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if folder else 0o666) & ~umask)


@contextlib.contextmanager
def atomic_writer(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing and move it into place on success.

    The file appears under its final name only complete (flushed and fsynced); if the block
    raises, the temporary file is removed and any previous file at `path` is untouched.

    Args:
        path: The final path.
        mode: ``"w"`` (UTF-8 text) or ``"wb"``.

    Raises:
        OutputError: The folder cannot be created or written (permissions, full disk).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The writer's PID is in the name, so a later run can tell a killed writer's leftover
        # (see `remove_stale_temporaries`) from a file another live process is writing right now.
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc} (choose another output folder)") from exc
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        default_permissions(tmp_name)
        os.replace(tmp_name, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        if isinstance(exc, OSError):
            raise OutputError(
                f"{path}: cannot write: {exc.strerror or exc} (check free space and permissions)"
            ) from exc
        raise


def private_dir(parent: str | Path, prefix: str) -> Path:
    """A new temporary folder in `parent`, named ``<prefix>.<pid>.<random>``.

    The creator's PID in the name lets `remove_stale_temporaries` tell a killed process's leftover
    from a folder a live process is still filling.
    """
    return Path(tempfile.mkdtemp(prefix=f"{prefix}.{os.getpid()}.", dir=parent))


def _writer_pid(name: str) -> int | None:
    parts = name.split(".")
    candidate = parts[-3] if name.endswith(".tmp") and len(parts) >= 4 else parts[-2] if len(parts) >= 3 else ""
    return int(candidate) if candidate.isascii() and candidate.isdigit() else None


def remove_stale_temporaries(folder: str | Path, prefix: str = ".") -> int:
    """Delete temporary files and folders (``atomic_writer``, `private_dir`) whose creator is gone.

    Only names starting with `prefix` that carry a PID are considered; those of live processes stay.

    Returns:
        How many were removed.
    """
    removed = 0
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    for candidate in folder.glob(f"{glob_escape(prefix)}*"):
        if not candidate.name.startswith("."):
            continue
        pid = _writer_pid(candidate.name)
        if pid is None:
            continue
        try:
            os.kill(pid, 0)
            continue  # the writer is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, owned by someone else
        with contextlib.suppress(OSError):
            if candidate.is_dir() and not candidate.is_symlink():
                shutil.rmtree(candidate)
            else:
                candidate.unlink()
            removed += 1
    return removed


def write_text(text: str, path: str | Path) -> None:
    """Write `text` (ending in a newline), atomically."""
    with atomic_writer(path) as handle:
        handle.write(text if text.endswith("\n") else text + "\n")


def write_json(data: Any, path: str | Path) -> None:
    """Write `data` as indented UTF-8 JSON, atomically."""
    with atomic_writer(path) as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
