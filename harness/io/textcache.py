"""Vectors found by their text: the embedding cache's store keyed by (model identity, exact text).

A corpus entry (`harness.io.cache`) holds the vectors of one corpus; this store holds every vector a model
made, found by the sha256 of the exact text it encoded, wherever that text was first encoded (another
corpus, a subset, a superset, an edited corpus), so encoding costs only the texts the store lacks.

Layout: ``<cache_dir>/texts/<namespace>/`` per (model fingerprint, kind of text, text rule, dtype), with
``inputs.json`` naming them. It holds *segments*, each written by one process and never changed after:
``<id>.keys.npy`` (the first 8 bytes of each text's sha256 as sorted uint64), ``<id>.meta.npy`` (per key:
the next 16 bytes of the sha256, a checksum of the vector and its key, and the vector's row, 4 x uint64),
``<id>.vectors.npy`` (float32) — each written atomically — and ``<id>.json`` (rows, dimension) written last:
a segment without it is never read. When an encode finishes, the segments it wrote (one per chunk and per
checkpoint) are merged into one (`TextStore.compact`), so a lookup visits a segment per run, not per chunk. A lookup memory-maps the segments and finds each text by binary search
(`numpy.searchsorted`), newest segment first: no dict of texts, memory bounded by one chunk's rows. A
vector whose checksum fails, or a segment whose files disagree with its manifest or hold another dimension,
is skipped with a warning and the text encoded again. Two processes writing at once write segments of their
own names; a reader sees a segment whole or not at all.

A run holds a shared lock on the namespaces (and corpus entries) it reads (`reading`); `prune_cache` skips
whatever is locked, and removes a segment manifest first, so a reader either sees it whole or not at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError, OutputError
from harness.io.cache import check_removable, content_key, remove_tree
from harness.io.files import HeldLock, atomic_writer, hold_lock, remove_stale_temporaries, write_json

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

TEXTS_FORMAT = 1


def text_digests(texts: Sequence[str]) -> np.ndarray:
    """Per text, 3 uint64: the sorted key (sha256 bytes 0-7, big-endian) and the check words (bytes 8-23)."""
    import numpy as np

    raw = b"".join(hashlib.sha256(text.encode("utf-8")).digest()[:24] for text in texts)
    return np.frombuffer(raw, dtype=">u8").reshape(len(texts), 3).astype(np.uint64)


def row_checksums(vectors: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """A checksum per row: its float32 words times odd weights, plus the row's key (mod 2**64).

    Any change of one word changes it (an odd weight is invertible mod 2**64), and so does a vector filed
    under another text's key."""
    import numpy as np

    dimension = vectors.shape[1]
    weights = np.random.default_rng(dimension).integers(0, 2**62, size=dimension, dtype=np.uint64) * 2 + 1
    words = np.ascontiguousarray(vectors, dtype=np.float32).view(np.uint32).astype(np.uint64)
    with np.errstate(over="ignore"):
        return (words * weights).sum(axis=1, dtype=np.uint64) + keys.astype(np.uint64)


class _Segment:
    """One written segment: its manifest's facts; its arrays are memory-mapped per lookup (`arrays`), so no file
    stays open between lookups (an MS MARCO-size cache has hundreds of segments)."""

    def __init__(self, folder: Path, name: str):
        manifest = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        self.folder, self.name = folder, name
        self.rows, self.dimension = int(manifest["rows"]), int(manifest["dimension"])
        self.manifest = folder / f"{name}.json"
        self.arrays()  # checked once when first seen

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys, meta, vectors), memory-mapped and checked against the manifest.

        Raises:
            OSError, ValueError: A file is missing, unreadable, holds a pickle, or disagrees with the manifest.
        """
        import numpy as np

        keys, meta, vectors = (
            np.load(self.folder / f"{self.name}.{part}.npy", mmap_mode="r", allow_pickle=False)
            for part in ("keys", "meta", "vectors")
        )
        shapes = (keys.shape, meta.shape, vectors.shape)
        if shapes != ((self.rows,), (self.rows, 4), (self.rows, self.dimension)) or vectors.dtype != np.float32:
            raise ValueError(f"files of shapes {shapes} ({vectors.dtype}) for {self.rows} rows")
        return keys, meta, vectors


class TextStore:
    """The vectors of one namespace (model, kind of text), found by text; counts what it served and refused.

    Attributes:
        hits: Vectors served. rejected: Vectors found but refused (checksum or dimension) and encoded again.
    """

    def __init__(self, root: Path, inputs: dict[str, Any]):
        self.inputs = dict(inputs)
        self.folder = root / "texts" / content_key(self.inputs)
        self.writable = True
        self.hits = self.rejected = 0
        self._segments: dict[str, _Segment | None] = {}  # name → segment (None: refused)
        self._touched: set[str] = set()
        self._written: list[str] = []  # the segments this store wrote (`compact` merges them)

    def _refresh(self) -> list[_Segment]:
        """The segments on disk, newest first (opened once; a refused one stays refused)."""
        try:
            names = sorted((p.name[:-5] for p in self.folder.glob("*.json") if p.name != "inputs.json"), reverse=True)
        except OSError:
            names = []
        for name in names:
            if name not in self._segments:
                try:
                    self._segments[name] = _Segment(self.folder, name)
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    self._damaged(name, exc)
        return [s for s in (self._segments[n] for n in names) if s is not None]

    def lookup(self, texts: Sequence[str], dimension: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """(The rows of `texts` found, their vectors in that order — None when none was found).

        A segment of another `dimension` (once known) is refused whole; a vector whose checksum fails is
        refused; both are counted in `rejected` and warned about, and their texts are left to encode."""
        import numpy as np

        digests = text_digests(texts)
        missing = np.arange(len(texts))
        found_rows, found_vectors = [], []
        for segment in self._refresh():
            if not missing.size:
                break
            if not segment.rows:
                continue
            try:
                keys, meta, stored = segment.arrays()
            except (OSError, ValueError) as exc:
                self._damaged(segment.name, exc)
                continue
            wanted = digests[missing]
            position = np.minimum(np.searchsorted(keys, wanted[:, 0]), segment.rows - 1)
            meta = meta[position]
            hit = (keys[position] == wanted[:, 0]) & (meta[:, 0] == wanted[:, 1]) & (meta[:, 1] == wanted[:, 2])
            if not hit.any():
                continue
            if dimension is not None and segment.dimension != dimension:
                self._refuse(segment, int(hit.sum()), f"dimension {segment.dimension}, the model's is {dimension}")
                continue
            vectors = np.asarray(stored[np.minimum(meta[hit, 3], segment.rows - 1)], dtype=np.float32)
            del keys, stored  # the maps close: no file stays open between lookups
            good = row_checksums(vectors, wanted[hit, 0]) == meta[hit, 2]
            if not good.all():
                bad = int((~good).sum())
                self.rejected += bad
                logger.warning(
                    "%d cached vector(s) in %s/%s failed their checksum; encoding their texts again",
                    bad,
                    self.folder,
                    segment.name,
                )
            dimension = segment.dimension
            found_rows.append(missing[hit][good])
            found_vectors.append(vectors[good])
            missing = np.setdiff1d(missing, found_rows[-1], assume_unique=True)
            self._touch(segment)
        if not found_rows:
            return np.zeros(0, dtype=np.int64), None
        rows = np.concatenate(found_rows)
        self.hits += len(rows)
        return rows, np.concatenate(found_vectors)

    def _damaged(self, name: str, exc: Exception) -> None:
        """Never use segment `name` again in this process; warn unless it was pruned (its manifest is gone)."""
        if (self.folder / f"{name}.json").exists():
            logger.warning("damaged text cache segment %s/%s, not used: %s", self.folder, name, exc)
        self._segments[name] = None

    def _refuse(self, segment: _Segment, wanted: int, why: str) -> None:
        """Never use `segment` again in this process; its `wanted` vectors count as rejected."""
        logger.warning("text cache segment %s/%s not used: %s", self.folder, segment.name, why)
        self.rejected += wanted
        self._segments[segment.name] = None

    def _touch(self, segment: _Segment) -> None:
        """Mark a segment used now (`prune_cache --older-than` goes by last use), once per process."""
        if segment.name not in self._touched:
            self._touched.add(segment.name)
            with contextlib.suppress(OSError):
                os.utime(segment.manifest)

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store `vectors` of `texts` as a new segment (best effort: an unwritable cache warns once)."""
        import numpy as np

        if not self.writable or not len(texts):
            return
        digests = text_digests(texts)
        _, first = np.unique(digests, axis=0, return_index=True)
        order = first[np.argsort(digests[first, 0], kind="stable")]
        vectors = np.ascontiguousarray(vectors[order], dtype=np.float32)
        keys = digests[order, 0]
        rows = np.arange(len(keys), dtype=np.uint64)
        meta = np.column_stack([digests[order, 1], digests[order, 2], row_checksums(vectors, keys), rows])
        self._write(keys, meta, [vectors])

    def _write(self, keys: np.ndarray, meta: np.ndarray, blocks) -> str | None:
        """Write a segment: keys and meta, the vectors from `blocks` (arrays, in row order), the manifest last."""
        import numpy as np

        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            if not (self.folder / "inputs.json").is_file():
                write_json({"format": TEXTS_FORMAT, "inputs": self.inputs}, self.folder / "inputs.json")
            for part, array in (("keys", keys), ("meta", meta)):
                with atomic_writer(self.folder / f"{name}.{part}.npy", "wb") as handle:
                    np.save(handle, array, allow_pickle=False)
            dimension = 0
            with atomic_writer(self.folder / f"{name}.vectors.npy", "wb") as handle:
                for n, block in enumerate(blocks):  # streamed: one block in memory at a time
                    if n == 0:
                        dimension = block.shape[1]
                        header = {"descr": "<f4", "fortran_order": False, "shape": (len(keys), dimension)}
                        np.lib.format.write_array_header_1_0(handle, header)
                    handle.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
            write_json({"format": TEXTS_FORMAT, "rows": len(keys), "dimension": dimension}, self._manifest(name))
        except OutputError as exc:
            logger.warning("text cache %s is not writable (%s); continuing without it", self.folder, exc)
            self.writable = False
            return None
        self._written.append(name)
        return name

    def compact(self, max_rows: int = 1 << 21) -> None:
        """Merge the segments this store wrote into as few as hold `max_rows` each (keys and meta in memory,
        40 bytes a row; vectors copied block by block), then remove them (manifest first: a reader that
        listed one and opens it after skips it)."""
        group: list[_Segment] = []
        for name in list(self._written):
            segment = self._segments.get(name) or self._open(name)
            if segment is None:
                continue
            if group and sum(s.rows for s in group) + segment.rows > max_rows:
                self._merge(group)
                group = []
            group.append(segment)
        if len(group) > 1:
            self._merge(group)

    def _open(self, name: str) -> _Segment | None:
        try:
            self._segments[name] = _Segment(self.folder, name)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._damaged(name, exc)
        return self._segments.get(name)

    def _merge(self, group: list[_Segment]) -> None:
        import numpy as np

        if len(group) < 2 or not self.writable:
            return
        try:
            parts = [segment.arrays()[:2] for segment in group]
        except (OSError, ValueError):
            return  # pruned or damaged meanwhile: leave them as they are
        offsets = np.cumsum([0] + [segment.rows for segment in group[:-1]]).astype(np.uint64)
        keys = np.concatenate([keys for keys, _ in parts])
        meta = np.concatenate([np.array(meta, dtype=np.uint64) for _, meta in parts])
        meta[:, 3] += np.repeat(offsets, [segment.rows for segment in group])  # rows of the concatenated vectors
        order = np.argsort(keys, kind="stable")
        blocks = (np.asarray(segment.arrays()[2]) for segment in group)
        merged = self._write(keys[order], meta[order], blocks)
        if merged is None:
            return
        for segment in group:
            self._written.remove(segment.name)
            self._segments[segment.name] = None
            segment.manifest.unlink(missing_ok=True)
            for part in ("keys", "meta", "vectors"):
                (self.folder / f"{segment.name}.{part}.npy").unlink(missing_ok=True)

    def _manifest(self, name: str) -> Path:
        return self.folder / f"{name}.json"


def encode_with_store(
    store: TextStore | None, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray], dimension: int | None
) -> tuple[np.ndarray, int]:
    """(The vectors of `texts`, how many texts were encoded): those `store` lacks are encoded once each (a
    text repeated is encoded once) by `encode` and stored; the rest come from the store."""
    import numpy as np

    if store is None or not texts:
        return encode(list(texts)), len(texts)
    rows, cached = store.lookup(texts, dimension)
    missing = np.setdiff1d(np.arange(len(texts)), rows)
    unique: dict[str, int] = {}
    for row in missing.tolist():
        unique.setdefault(texts[row], len(unique))
    fresh = encode(list(unique)) if unique else None
    if fresh is not None:
        store.add(list(unique), fresh)
    vectors = np.empty((len(texts), (fresh if fresh is not None else cached).shape[1]), dtype=np.float32)
    if cached is not None:
        vectors[rows] = cached
    if fresh is not None:
        vectors[missing] = fresh[[unique[texts[row]] for row in missing.tolist()]]
    return vectors, len(unique)


def text_stores(root: Path, fingerprint: dict[str, Any], text_rule: str) -> tuple[TextStore, TextStore]:
    """The stores of a model's document texts (made by `text_rule`) and of its query texts."""
    common = {"model": fingerprint, "dtype": "float32"}
    return TextStore(root, {"kind": "doc", "text_rule": text_rule, **common}), TextStore(
        root, {"kind": "query", **common}
    )


def vector_counts(
    counts: dict[str, int], stores: Sequence[TextStore | None], n_queries: int, queries_encoded: int
) -> dict[str, int | None]:
    """A result's record of where its vectors came from (`Result.cost` ``vectors``): documents and queries
    from the cache and encoded (documents None where not counted: encoded by Ray or several devices), and
    cached vectors refused as damaged (encoded again)."""
    return {
        "docs_cached": counts.get("cached", 0) if counts else None,
        "docs_encoded": counts.get("encoded", 0) if counts else None,
        "queries_cached": n_queries - queries_encoded,
        "queries_encoded": queries_encoded,
        "rejected": sum(store.rejected for store in stores if store is not None),
    }


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


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def cache_usage(root: Path) -> dict[str, int]:
    """Bytes on disk per top-level folder of the cache (``embeddings``, ``texts``, ``models``, ...) and ``total``."""
    usage: dict[str, int] = {}
    if root.is_dir():
        for child in sorted(root.iterdir()):
            usage[child.name] = _folder_bytes(child) if child.is_dir() else child.stat().st_size
    usage["total"] = sum(usage.values())
    return usage


def _prunable(root: Path) -> list[dict[str, Any]]:
    """Every unit prune may remove: a text segment, a corpus or query entry; with bytes and last use."""
    units = []
    for namespace in sorted(p for p in (root / "texts").glob("*") if p.is_dir()):
        for manifest in namespace.glob("*.json"):
            if manifest.name != "inputs.json":
                files = [manifest, *(namespace / f"{manifest.stem}.{part}.npy" for part in ("keys", "meta", "vectors"))]
                size = sum(f.stat().st_size for f in files if f.is_file())
                units.append({"kind": "texts", "path": namespace, "files": files, "bytes": size, "used": manifest})
    for entry in sorted(p for p in (root / "embeddings").glob("*") if p.is_dir()):
        manifest = entry / "manifest.json"
        used = manifest if manifest.is_file() else entry / "key.json"
        units.append({"kind": "entry", "path": entry, "files": [], "bytes": _folder_bytes(entry), "used": used})
    for unit in units:
        try:
            unit["mtime"] = unit["used"].stat().st_mtime
        except OSError:
            unit["mtime"] = 0.0
    return units


def prune_cache(
    root: Path, older_than_s: float | None = None, max_bytes: int | None = None, dry_run: bool = False
) -> list[dict[str, Any]]:
    """Remove text segments and corpus/query entries unused for `older_than_s`, then the least recently used
    until ``embeddings/`` and ``texts/`` hold at most `max_bytes`; whatever a run holds (`reading`) stays.

    Returns:
        What was removed (or, with `dry_run`, would be): kind, path, bytes, last use (epoch seconds).
    """
    units = sorted(_prunable(root), key=lambda unit: unit["mtime"])
    if not dry_run and units:  # a read-only cache: one line naming it, before anything goes
        check_removable(
            root, [root / "locks", *{unit["path"].parent: None for unit in units}, *(u["path"] for u in units)]
        )
    total, now, removed = sum(unit["bytes"] for unit in units), time.time(), []
    for unit in units:
        old = older_than_s is not None and now - unit["mtime"] > older_than_s
        large = max_bytes is not None and total > max_bytes
        if not (old or large):
            continue
        if dry_run or _remove(unit):
            total -= unit["bytes"]
            removed.append({k: str(v) if k == "path" else v for k, v in unit.items() if k in ("kind", "path", "bytes")})
            removed[-1]["last_used"] = unit["mtime"]
    return removed


def _remove(unit: dict[str, Any]) -> bool:
    """Remove one unit unless a run holds it; a segment's manifest goes first (no reader opens it after)."""
    lock = _lock(unit["path"], shared=False, wait=False)
    if lock is None and _lock_path(unit["path"]).exists():
        logger.info("in use, kept: %s", unit["path"])
        return False
    try:
        if unit["kind"] == "texts":
            for path in unit["files"]:
                path.unlink(missing_ok=True)
        else:
            (unit["path"] / "manifest.json").unlink(missing_ok=True)
            remove_tree(unit["path"], unit["path"].parent.parent)
            if lock is not None:
                lock.release(remove=True)  # the entry's lock file goes with it
        remove_stale_temporaries(unit["path"].parent if unit["kind"] == "entry" else unit["path"])
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
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if not match:
        raise ValueError(f"{text!r} is not a duration: use a number and one of s, m, h, d, w (e.g. 30d, 12h)")
    return float(match.group(1)) * _UNITS[match.group(2)]
