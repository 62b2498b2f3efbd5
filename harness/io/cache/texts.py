"""Vectors found by their text: the embedding store keyed by (model identity, exact text).

Every vector a model made is held here, once, found by the sha256 of the exact text it encoded, wherever that text
was first encoded (another corpus, a subset, a superset, an edited corpus, the queries), so encoding costs only the
texts the store lacks; a corpus entry (`harness.io.cache.entries`) names its texts' digests in corpus order.

Layout: ``<cache_dir>/texts/<namespace>/`` per (model fingerprint, kind of text, text rule, dtype, layout), with
``inputs.json`` naming them. It holds *segments*, each written by one process and never changed after:
``<id>.keys.npy`` (the first 8 bytes of each text's sha256 as sorted uint64), ``<id>.meta.npy`` (per key:
the next 16 bytes of the sha256, a checksum of the vector and its key, and the vector's row, 4 x uint64),
``<id>.vectors.npy`` (in the order the texts came: a chunk of a corpus reads back as one memory-mapped slice) — each
written atomically — and ``<id>.json`` (rows, dimension) written last:
a segment without it is never read. A *ragged* namespace (a late-interaction model: a matrix of token vectors per
text) stores float16 token vectors, ``<id>.vectors.npy`` all texts' rows one after another, and
``<id>.offsets.npy`` (rows + 1 uint64: text r is rows ``offsets[r]:offsets[r + 1]``); its manifest also names
``tokens`` and ``dtype``. When an encode finishes, the segments it wrote (one per chunk and per checkpoint) are
merged into one (`TextStore.compact`), so a lookup visits a segment per run, not per chunk. A lookup memory-maps
the segments and finds each text by binary search (`numpy.searchsorted`), newest segment first: no dict of texts,
memory bounded by one chunk's rows. A vector whose checksum fails, or a segment whose files disagree with its
manifest or hold another dimension, is skipped with a warning and the text encoded again. Two processes writing at
once write segments of their own names; a reader sees a segment whole or not at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import OutputError
from harness.io.cache.upkeep import reading
from harness.io.files import atomic_writer, remove_stale_temporaries, write_json

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

TEXTS_FORMAT = 1


def content_key(inputs: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of `inputs`."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


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


def matrix_checksums(matrices: Sequence[np.ndarray], keys: np.ndarray) -> np.ndarray:
    """A checksum per matrix of a ragged store: 8 bytes of its float16 words' BLAKE2b, plus its key (mod 2**64)."""
    import numpy as np

    digests = [
        hashlib.blake2b(np.ascontiguousarray(m, dtype="<f2").tobytes(), digest_size=8).digest() for m in matrices
    ]
    words = np.frombuffer(b"".join(digests), dtype=">u8").astype(np.uint64)
    with np.errstate(over="ignore"):
        return words + keys.astype(np.uint64)


class _Segment:
    """One written segment: its manifest's facts; its arrays are memory-mapped per lookup (`arrays`), so no file
    stays open between lookups (an MS MARCO-size cache has hundreds of segments)."""

    def __init__(self, folder: Path, name: str):
        manifest = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        self.folder, self.name = folder, name
        self.rows, self.dimension = int(manifest["rows"]), int(manifest["dimension"])
        self.tokens = int(manifest["tokens"]) if "tokens" in manifest else None  # a ragged segment's
        self.manifest = folder / f"{name}.json"
        self.arrays()  # checked once when first seen

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """(keys, meta, vectors, offsets — None unless ragged), memory-mapped and checked against the manifest.

        Raises:
            OSError, ValueError: A file is missing, unreadable, holds a pickle, or disagrees with the manifest.
        """
        import numpy as np

        parts = ("keys", "meta", "vectors") + (("offsets",) if self.tokens is not None else ())
        keys, meta, vectors, *offsets = (
            np.load(self.folder / f"{self.name}.{part}.npy", mmap_mode="r", allow_pickle=False) for part in parts
        )
        rows, dtype = (self.rows, np.float32) if self.tokens is None else (self.tokens, np.float16)
        shapes = (keys.shape, meta.shape, vectors.shape, *(o.shape for o in offsets))
        expected = ((self.rows,), (self.rows, 4), (rows, self.dimension), *((self.rows + 1,) for _ in offsets))
        if shapes != expected or vectors.dtype != dtype or (offsets and int(offsets[0][-1]) != rows):
            raise ValueError(f"files of shapes {shapes} ({vectors.dtype}) for {self.rows} rows")
        return keys, meta, vectors, (offsets[0] if offsets else None)


class TextStore:
    """The vectors of one namespace (model, kind of text), found by text; counts what it served and refused.

    A store whose inputs say ``"layout": "ragged"`` holds a float16 matrix per text (`token_stores`); its
    `lookup` and `add` take and give lists of matrices where a fixed-width store's take and give one array.

    Attributes:
        hits: Vectors served. rejected: Vectors found but refused (checksum or dimension) and encoded again.
    """

    def __init__(self, root: Path, inputs: Mapping[str, Any]):
        self.inputs = dict(inputs)
        self.ragged = self.inputs.get("layout") == "ragged"
        self.folder = root / "texts" / content_key(self.inputs)
        self.writable = True
        self.hits = self.rejected = 0
        self._segments: dict[str, _Segment | None] = {}  # name → segment (None: refused)
        self._touched: set[str] = set()
        self._written: list[str] = []  # the segments this store wrote (`compact` merges them)
        self._vanished = 0  # segments found gone as they were read (merged away or pruned by another process)

    def segments(self) -> list[_Segment]:
        """The segments on disk, newest first (opened once; a refused one stays refused)."""
        try:
            names = sorted((p.name[:-5] for p in self.folder.glob("*.json") if p.name != "inputs.json"), reverse=True)
        except OSError:
            names = []
        for name in names:
            if name not in self._segments:
                self._open(name)
        return [s for s in (self._segments[n] for n in names) if s is not None]

    def lookup(self, texts: Sequence[str], dimension: int | None = None) -> tuple[np.ndarray, Any]:
        """(The rows of `texts` found, their vectors in that order — None when none was found; a list of
        matrices for a ragged store).

        A segment of another `dimension` (once known) is refused whole; a vector whose checksum fails is
        refused; both are counted in `rejected` and warned about, and their texts are left to encode."""
        rows, vectors = self.find(text_digests(texts), dimension)
        self.hits += len(rows)
        return rows, vectors

    def holds(self, digests: np.ndarray) -> np.ndarray:
        """Per text digest (`text_digests`), whether a segment holds it: all three words match, as `find` matches them
        (keys only: no vector is read)."""
        import numpy as np

        held = np.zeros(len(digests), dtype=bool)
        for segment in self._segments_until_settled(set(), lambda: not held.all()):
            try:
                keys, meta, _, _ = segment.arrays()
            except (OSError, ValueError) as exc:
                self._damaged(segment.name, exc)
            else:
                if segment.rows:
                    position = np.minimum(np.searchsorted(keys, digests[:, 0]), segment.rows - 1)
                    meta = meta[position]
                    held |= (
                        (keys[position] == digests[:, 0])
                        & (meta[:, 0] == digests[:, 1])
                        & (meta[:, 1] == digests[:, 2])
                    )
        return held

    def gather(self, digests: np.ndarray, dimension: int | None = None) -> np.ndarray | None:
        """The vectors of `digests` in that order, every checksum verified, or None when one is missing or refused.
        Rows stored one after another in one segment (a corpus encoded in order) come as a read-only memory map."""
        rows, vectors = self.find(digests, dimension, whole=True)
        return vectors if len(rows) == len(digests) else None

    def find(self, digests: np.ndarray, dimension: int | None = None, whole: bool = False) -> tuple[np.ndarray, Any]:
        """`lookup` by text digests; with `whole`, a slice of one segment's memory map when it holds them all in
        order."""
        import numpy as np

        missing = np.arange(len(digests))
        found_rows, found_vectors = [], []
        visited: set[str] = set()
        for segment in self._segments_until_settled(visited, lambda: bool(missing.size)):
            if not missing.size:
                break
            if not segment.rows:
                continue
            try:
                keys, meta, stored, offsets = segment.arrays()
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
            rows, ragged = np.minimum(meta[hit, 3], segment.rows - 1), offsets is not None
            if ragged:
                vectors = [np.array(stored[int(offsets[r]) : int(offsets[r + 1])]) for r in rows.tolist()]
                good = matrix_checksums(vectors, wanted[hit, 0]) == meta[hit, 2]
            else:
                start = int(rows[0])
                in_order = whole and hit.all() and np.array_equal(rows, np.arange(start, start + len(rows)))
                vectors = stored[start : start + len(rows)] if in_order else np.asarray(stored[rows], np.float32)
                good = row_checksums(vectors, wanted[hit, 0]) == meta[hit, 2]
            del keys, stored, offsets  # the maps close (a slice kept holds its own): no file stays open
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
            found_vectors.append(
                [v for v, g in zip(vectors, good) if g] if ragged else vectors[good] if not good.all() else vectors
            )
            missing = np.setdiff1d(missing, found_rows[-1], assume_unique=True)
            self._touch(segment)
        if not found_rows:
            return np.zeros(0, dtype=np.int64), None
        if len(found_rows) == 1 and not self.ragged:
            return found_rows[0], found_vectors[0]
        rows = np.concatenate(found_rows)
        vectors = [m for block in found_vectors for m in block] if self.ragged else np.concatenate(found_vectors)
        if whole and not self.ragged:
            vectors = vectors[np.argsort(rows)]
            rows = np.sort(rows)
        return rows, vectors

    def _segments_until_settled(self, visited: set[str], wanted: Callable[[], bool]) -> Iterator[_Segment]:
        """`segments` not in `visited` (added to it), listed again while `wanted()` and a segment vanished as it was
        read: another process merged it away (`compact` writes the merged segment before it removes the parts),
        so the folder now lists the segment that holds its vectors."""
        for _ in range(8):
            vanished = self._vanished
            for segment in self.segments():
                if segment.name not in visited:
                    visited.add(segment.name)
                    yield segment
            if self._vanished == vanished or not wanted():
                return

    def _damaged(self, name: str, exc: Exception) -> None:
        """Never use segment `name` again in this process; warn unless it was pruned or merged away (its manifest
        is gone: counted in `_vanished`)."""
        if (self.folder / f"{name}.json").exists():
            logger.warning("damaged text cache segment %s/%s, not used: %s", self.folder, name, exc)
        else:
            self._vanished += 1
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

    def add(self, texts: Sequence[str], vectors: Any, digests: np.ndarray | None = None) -> None:
        """Store `vectors` of `texts` (an array; for a ragged store, a matrix per text; or of `digests` instead of
        texts) as a new segment, vectors in their order (a corpus's chunk reads back as one slice), keys sorted
        (best effort: an unwritable cache warns once)."""
        import numpy as np

        digests = text_digests(texts) if digests is None else digests
        if not self.writable or not len(digests):
            return
        kept = np.sort(np.unique(digests, axis=0, return_index=True)[1])  # each text once, in its order
        by_key = np.argsort(digests[kept, 0], kind="stable")
        keys = digests[kept[by_key], 0]
        if self.ragged:
            matrices = [np.ascontiguousarray(vectors[n], dtype=np.float16) for n in kept.tolist()]
            offsets = np.cumsum([0] + [len(m) for m in matrices]).astype(np.uint64)
            checksums, blocks = (
                matrix_checksums([matrices[n] for n in by_key.tolist()], keys),
                [np.concatenate(matrices)],
            )
        else:
            offsets, blocks = None, [np.ascontiguousarray(vectors[kept], dtype=np.float32)]
            checksums = row_checksums(blocks[0][by_key], keys)
        meta = np.column_stack(
            [digests[kept[by_key], 1], digests[kept[by_key], 2], checksums, by_key.astype(np.uint64)]
        )
        self._write(keys, meta, blocks, offsets)

    def _write(self, keys: np.ndarray, meta: np.ndarray, blocks, offsets: np.ndarray | None = None) -> str | None:
        """Write a segment: keys and meta (and a ragged one's offsets), the vectors from `blocks` (arrays, in row
        order), the manifest last."""
        import numpy as np

        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        arrays = (("keys", keys), ("meta", meta), *((("offsets", offsets),) if offsets is not None else ()))
        descr, rows = ("<f4", len(keys)) if offsets is None else ("<f2", int(offsets[-1]))
        try:
            if not self._written and remove_stale_temporaries(self.folder):
                logger.info("removed temporary files of an interrupted run in %s", self.folder)
            if not (self.folder / "inputs.json").is_file():
                write_json({"format": TEXTS_FORMAT, "inputs": self.inputs}, self.folder / "inputs.json")
            for part, array in arrays:
                with atomic_writer(self.folder / f"{name}.{part}.npy", "wb") as handle:
                    np.save(handle, array, allow_pickle=False)
            dimension = 0
            with atomic_writer(self.folder / f"{name}.vectors.npy", "wb") as handle:
                for n, block in enumerate(blocks):  # streamed: one block in memory at a time
                    if n == 0:
                        dimension = block.shape[1]
                        header = {"descr": descr, "fortran_order": False, "shape": (rows, dimension)}
                        np.lib.format.write_array_header_1_0(handle, header)
                    handle.write(np.ascontiguousarray(block, dtype=descr).tobytes())
            ragged = {} if offsets is None else {"tokens": rows, "dtype": "float16"}
            manifest = {"format": TEXTS_FORMAT, "rows": len(keys), "dimension": dimension, **ragged}
            write_json(manifest, self.folder / f"{name}.json")
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
            parts = [segment.arrays() for segment in group]
        except (OSError, ValueError):
            return  # pruned or damaged meanwhile: leave them as they are
        offsets = np.cumsum([0] + [segment.rows for segment in group[:-1]]).astype(np.uint64)
        keys = np.concatenate([part[0] for part in parts])
        meta = np.concatenate([np.array(part[1], dtype=np.uint64) for part in parts])
        meta[:, 3] += np.repeat(offsets, [segment.rows for segment in group])  # rows of the concatenated vectors
        tokens = None
        if self.ragged:  # each segment's token offsets, shifted past the tokens before it
            bases = np.cumsum([0] + [int(part[3][-1]) for part in parts[:-1]]).astype(np.uint64)
            ends = [np.asarray(part[3][1:], dtype=np.uint64) + base for part, base in zip(parts, bases)]
            tokens = np.concatenate([np.zeros(1, np.uint64), *ends])
        order = np.argsort(keys, kind="stable")
        del parts  # the maps close
        blocks = (np.asarray(segment.arrays()[2]) for segment in group)
        merged = self._write(keys[order], meta[order], blocks, tokens)
        if merged is None:
            return
        for segment in group:
            self._written.remove(segment.name)
            self._segments[segment.name] = None
            segment.manifest.unlink(missing_ok=True)
            for part in ("keys", "meta", "vectors", "offsets"):
                (self.folder / f"{segment.name}.{part}.npy").unlink(missing_ok=True)


def encode_with_store(
    store: TextStore | None, texts: Sequence[str], encode: Callable[[list[str]], Any], dimension: int | None
) -> tuple[Any, int]:
    """(The vectors of `texts`, how many texts were encoded): those `store` lacks are encoded once each (a
    text repeated is encoded once) by `encode` and stored; the rest come from the store.

    With a ragged store (`token_stores`) `encode` returns a matrix per text and so does this: a list of float16
    matrices, fresh ones cast as they are stored, so a hit and a miss give the same numbers."""
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
    if store.ragged:
        out: list[Any] = [None] * len(texts)
        for row, matrix in zip(rows.tolist(), cached or ()):
            out[row] = matrix
        for row in missing.tolist():
            out[row] = np.asarray(fresh[unique[texts[row]]], dtype=np.float16)
        return out, len(unique)
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


def token_stores(root: Path, fingerprint: Mapping[str, Any], text_rule: str) -> tuple[TextStore, TextStore]:
    """The ragged stores (a float16 matrix of token vectors per text) of a late-interaction model's document
    texts (made by `text_rule`) and of its query texts: namespaces of their own beside `text_stores`'."""
    common = {"model": dict(fingerprint), "dtype": "float16", "layout": "ragged"}
    return TextStore(root, {"kind": "doc", "text_rule": text_rule, **common}), TextStore(
        root, {"kind": "query", **common}
    )


def encode_token_matrices(
    root: Path | None,
    fingerprint: Mapping[str, Any] | None,
    kind: str,
    texts: Sequence[str],
    encode: Callable[[list[str]], Sequence[np.ndarray]],
    text_rule: str = "",
) -> tuple[list[np.ndarray], int]:
    """(A float16 matrix, tokens × dimension, per text of `texts`; how many texts were encoded), for a
    late-interaction model: each text the store of (`fingerprint`, `kind` — ``doc`` or ``query`` —, `text_rule`)
    under the cache `root` lacks is encoded once by `encode` (a matrix per text) and stored; the others are read
    from it, under a shared lock `cache prune` respects. Without a `root` or a `fingerprint` nothing is stored,
    and the matrices are still float16, so a run's numbers do not depend on the cache."""
    import numpy as np

    if root is None or fingerprint is None:
        return [np.asarray(m, dtype=np.float16) for m in encode(list(texts))], len(texts)
    store = token_stores(root, fingerprint, text_rule)[kind != "doc"]
    with reading([store.folder]):
        matrices, encoded = encode_with_store(store, texts, encode, None)
    return matrices, encoded


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
