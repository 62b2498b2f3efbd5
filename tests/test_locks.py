"""The one file-lock helper (`harness.io.files.hold_lock`) behind the data dir's per-dataset lock and the cache's read
and prune locks: it excludes a process of an older version (a bare ``fcntl.flock`` on the same file, as those took),
a waiter on a lock file its holder removed locks the file now at the path, and without fcntl filelock takes over."""

from __future__ import annotations

import fcntl
import sys
import threading

import filelock  # noqa: F401 - imported before fcntl is hidden: the platform's own lock, not its soft fallback
import pytest

from harness.datasets.install import locked
from harness.io.cache.upkeep import prune_cache, reading
from harness.io.files import hold_lock


def _taken(path, shared: bool = False) -> bool:
    """Whether a bare flock on `path` (an older harness's lock, another open file) is refused right now."""
    with open(path, "a+b") as handle:
        try:
            fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


@pytest.mark.parametrize("where", ["dataset", "cache entry"])
def test_an_older_process_and_this_one_exclude_each_other_on_the_same_files(tmp_path, where):
    cache = tmp_path / "cache"
    entry = cache / "embeddings" / "abc"
    entry.mkdir(parents=True)
    (entry / "key.json").write_text("{}")  # a byte to prune
    # The files older versions locked: <data dir>/.locks/<name>.lock and <cache>/locks/<folder>-<name>.lock.
    path = (
        tmp_path / "data" / ".locks" / "scifact.lock" if where == "dataset" else cache / "locks" / "embeddings-abc.lock"
    )
    if where == "dataset":
        with locked(tmp_path / "data", "scifact"):
            assert _taken(path)
    else:
        with reading([entry]):
            assert _taken(path) and not _taken(path, shared=True)  # another reader may read too
            assert prune_cache(cache, max_bytes=0) == [] and entry.is_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as older:
        fcntl.flock(older, fcntl.LOCK_EX)  # an older process holds it
        assert hold_lock(path, wait=False) is None and hold_lock(path, shared=True, wait=False) is None
        if where == "cache entry":
            assert prune_cache(cache, max_bytes=0) == [] and entry.is_dir()
    if where == "cache entry":
        assert [unit["kind"] for unit in prune_cache(cache, max_bytes=0)] == ["entry"] and not entry.exists()
        assert not path.exists()  # a removed entry's lock file goes with it


def test_a_waiter_on_a_lock_file_its_holder_removed_locks_the_file_at_the_path(tmp_path):
    path = tmp_path / "locks" / "x.lock"
    first = hold_lock(path)
    waited, held = threading.Event(), []
    waiter = threading.Thread(target=lambda: held.append(hold_lock(path, waiting=waited.set)))
    waiter.start()
    assert waited.wait(30)
    first.release(remove=True)  # the file the waiter is blocked on goes
    waiter.join(30)
    assert held and held[0] is not None and path.is_file()
    assert _taken(path)  # the waiter holds the file everyone else opens, not the one removed
    held[0].release(remove=True)
    assert not path.exists() and not _taken(path)


def test_without_fcntl_filelock_holds_the_exclusive_locks(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "fcntl", None)  # as on Windows: `import fcntl` fails
    path = tmp_path / "locks" / "x.lock"
    assert hold_lock(path, shared=True) is None  # no shared locks there: nothing held, as before
    with hold_lock(path) as lock:
        assert hold_lock(path, wait=False) is None
    assert lock is not None
    second = hold_lock(path, wait=False)
    assert second is not None
    second.release(remove=True)
    assert not path.exists()
    with locked(tmp_path / "data", "scifact"):
        assert hold_lock(tmp_path / "data" / ".locks" / "scifact.lock", wait=False) is None
    assert not (tmp_path / "data" / ".locks").exists()
