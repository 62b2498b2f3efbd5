"""Where a command will write, checked before any work: an output folder that exists or can be made, is a folder,
and can be written to; a dangling symbolic link named as one. One line naming the path, before a model or a
dataset is loaded, instead of a misleading error (``File exists``) after the whole run.

Nothing is created here: a check that fails leaves nothing behind, and one that passes leaves the folder to the
writer (which creates it as it writes, atomically)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import OutputError


def _unwritable(folder: Path) -> str | None:
    """Why `folder` (an existing folder) cannot be written to, or None: a read-only file system, or permissions."""
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    if hasattr(os, "statvfs") and os.statvfs(folder).f_flag & os.ST_RDONLY:
        return "Read-only file system"
    return "Permission denied"


def check_output_dir(path: str | Path | None, what: str = "output folder", file: Path | None = None) -> None:
    """Refuse an output folder that cannot hold results, before any work.

    It (or, when it does not exist yet, its nearest existing parent, which is where it would be made) must be a
    folder this process can write to; no path on the way may be a dangling symbolic link or a file.

    Args:
        path: The folder; None (nothing is to be written) passes.
        what: How messages name it (``output folder``, ``pool folder``...).
        file: The file to be written in `path`, for the messages (`check_output_file`).

    Raises:
        OutputError: One line naming the path and what to do.
    """
    if path is None:
        return
    path = Path(path).expanduser()
    wanted = file or path  # what messages say is wanted: the folder, or the file to be written in it
    for candidate in (path, *path.parents):
        on_the_way = "" if candidate == wanted else f" (on the way to the {what} {wanted})"
        if candidate.is_symlink() and not candidate.exists():
            target = os.readlink(candidate)
            raise OutputError(
                f"{candidate}: a dangling symbolic link to {target}, which does not exist{on_the_way} "
                f"(create {target}, or choose another {what})"
            )
        if not candidate.exists():
            continue
        if not candidate.is_dir():
            raise OutputError(f"{candidate}: a file, not a folder{on_the_way} (choose another {what})")
        why = _unwritable(candidate)
        if why is not None:  # worded as `atomic_writer` words a write that failed
            raise OutputError(f"{candidate}: cannot write: {why}{on_the_way} (choose another {what})")
        return


def check_output_file(path: str | Path, what: str = "output file") -> None:
    """Refuse an output file that cannot be written, before any work: it must not be a folder, and its folder
    must pass `check_output_dir`.

    Raises:
        OutputError: One line naming the path and what to do.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise OutputError(f"{path}: the {what} is a folder (name a file)")
    check_output_dir(path.parent, what, file=path)
