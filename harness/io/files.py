"""Writing derived files safely: atomic writes (a temporary sibling, flushed, fsynced and renamed over the target,
so a crash never leaves a half file that looks complete), private temporary folders, the removal of what a killed
writer left, the permissions every written file gets, and the file locks processes take turns by (`hold_lock`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
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


# --- file locks: every lock the harness takes (the data dir's per-dataset lock, the cache's read and prune locks)


class HeldLock:
    """A lock `hold_lock` took: `release` it (or leave a ``with`` block); releasing twice is harmless."""

    def __init__(self, path: Path, release: Callable[[bool], None]):
        self.path = path
        self._release: Callable[[bool], None] | None = release

    def release(self, remove: bool = False) -> None:
        """Let go; with `remove`, the lock file goes too (while still held, where the platform allows: a process
        waiting on it then finds it gone and locks the file now at the path). A file that cannot go stays."""
        release, self._release = self._release, None
        if release is not None:
            release(remove)

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def hold_lock(
    path: str | Path, shared: bool = False, wait: bool = True, waiting: Callable[[], None] | None = None
) -> HeldLock | None:
    """Lock the file `path` (made, with its folder, when missing): exclusively, or `shared` with other readers.

    Where ``fcntl`` exists it is ``flock`` on `path` — the primitive and the files the harness has always
    locked, so a process of an older version and this one exclude each other — and, once held, the lock is
    checked to be on the file the path still names: a holder that removed its lock file on release (`HeldLock`)
    leaves a waiter locking a file nobody else sees, so it locks the one at the path now. Elsewhere (Windows)
    an exclusive lock is filelock's ``FileLock``; a shared one is not held (None): an open file cannot be
    deleted there anyway.

    Args:
        wait: Wait while another process holds it; without, return None when it is taken.
        waiting: Called before each wait (to say what the process waits for).

    Returns:
        The held lock; None when it is taken and `wait` is False, or shared locks are not available.

    Raises:
        OSError: The lock file cannot be made or opened, or the lock fails otherwise than by being taken.
    """
    path = Path(path)
    try:
        import fcntl
    except ImportError:
        return None if shared else _portable_lock(path, wait, waiting)
    mode, vanished = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX), 0
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            handle = open(path, "a+b")  # noqa: SIM115 - closed on release
        except FileNotFoundError:
            vanished += 1  # the folder went (empty, removed by a releasing holder) since it was made: make it again
            if vanished > 100:
                raise
            continue
        try:
            try:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    handle.close()
                    return None
                if waiting is not None:
                    waiting()
                fcntl.flock(handle, mode)
            if _names(path, handle.fileno()):
                break
        except BaseException:
            handle.close()
            raise
        handle.close()  # the holder before us removed this file: lock the one at the path now

    def release(remove: bool) -> None:
        try:
            if remove:
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
            fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            handle.close()

    return HeldLock(path, release)


def _names(path: Path, fd: int) -> bool:
    """Whether `path` names the open file `fd`."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _portable_lock(path: Path, wait: bool, waiting: Callable[[], None] | None) -> HeldLock | None:
    """`hold_lock`'s exclusive lock without fcntl: filelock's (``LockFileEx`` on Windows)."""
    import filelock

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        if not wait:
            return None
        if waiting is not None:
            waiting()
        lock.acquire()

    def release(remove: bool) -> None:
        lock.release()
        if remove:  # after the release: an open file cannot be deleted there
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    return HeldLock(path, release)
