"""The corpus entries of the embedding store: one corpus (or one query set) in its order, in chunks.

An entry's key is the sha256 of everything that decides its vectors: the model's identity (name,
a hash of its weights, tokenizer, max_seq_length, normalization), the text rule, the dtype, and the
sha256 of the corpus content (or of the query texts). A changed corpus or model therefore never
hits a stale entry; the key's inputs are written beside it as ``key.json``.

Layout: ``<cache_dir>/embeddings/<key>/`` holds per chunk ``chunk-00000.ids.json`` (its doc ids) and
``chunk-00000.keys.npy`` (each document's text digest, `harness.io.cache.texts.text_digests`): the vectors
themselves are held once, by text, in the model's store (`harness.io.cache.texts`), and a chunk is gathered from
its memory-mapped segments (a slice of one segment, no copy, for a corpus encoded in order). ``manifest.json``
(chunk count, rows, dimension, per-chunk sha256) is written last. An entry without a manifest is partial: a run
killed mid-encode resumes from the chunks written, and inside a chunk from the texts the store holds (the
checkpoints of `harness.retrieval.encode.encode_corpus` are simply texts stored). An entry whose files disagree with
its manifest, or whose vectors the store no longer holds (pruned, damaged), is dropped with a warning and recomputed
(encoding only what the store lacks); a damaged cache never yields a result.

An entry without a model store (a learned sparse encoder's rows, a CSR matrix per ``chunk-00000.npz``; the vectors
of a benchmark) keeps its rows in its own chunk files (``chunk-00000.npy``), with checkpoint pieces
(``chunk-00000.piece-<name>.npy`` + ``.ids.json``) that a whole chunk replaces. An entry an earlier version wrote
that way for a model is moved into the store once, when first opened (`EmbeddingEntry.migrate`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError, OutputError
from harness.io.cache.texts import TextStore, content_key, row_checksums, text_digests
from harness.io.files import atomic_writer, hold_lock, remove_stale_temporaries, write_json

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1


def cache_dir(option: str | Path | None = None) -> Path:
    """The cache root: `option`, else ``$BEIR_HARNESS_CACHE_DIR``, else the user cache folder.

    The default is independent of the current folder (``~/.cache/beir-harness`` on Linux,
    ``~/Library/Caches/beir-harness`` on macOS, ``%LOCALAPPDATA%\\beir-harness\\Cache`` on Windows).
    """
    if option:
        return Path(option).expanduser()
    if os.environ.get("BEIR_HARNESS_CACHE_DIR"):
        return Path(os.environ["BEIR_HARNESS_CACHE_DIR"]).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("beir-harness", appauthor=False))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class CacheCorrupt(HarnessError):
    """An entry's files disagree with its manifest."""


@dataclass
class EmbeddingEntry:
    """One cache entry: chunks of doc ids with their vectors' text digests, the vectors in `store`.

    Without a `store`, each chunk holds its vectors itself; a `sparse` entry's, rows of a learned sparse encoder: a
    CSR matrix saved as ``chunk-00000.npz`` (float32 data, int32 indices and indptr, the shape; no pickle) instead of
    a dense ``.npy``; everything else — ids files, manifest, verification, resume — is the same.
    """

    root: Path
    inputs: dict[str, Any]
    labels: dict[str, Any]
    writable: bool = True
    sparse: bool = False
    unwritable: str = ""  # why nothing could be stored (`not_writable`), once a write failed
    store: TextStore | None = None  # where the vectors are, by text

    @property
    def key(self) -> str:
        return self.root.name

    @property
    def complete(self) -> bool:
        return (self.root / "manifest.json").is_file()

    def _chunk(self, index: int) -> tuple[Path, Path]:
        suffix = ".keys.npy" if self.store is not None else ".npz" if self.sparse else ".npy"
        return self.root / f"chunk-{index:05d}{suffix}", self.root / f"chunk-{index:05d}.ids.json"

    def resumable(self, chunk_size: int) -> bool:
        """Whether this is a partial entry started with these inputs and this chunk size."""
        if self.complete or not (self.root / "key.json").is_file():
            return False
        try:
            started = json.loads((self.root / "key.json").read_text())
        except (OSError, ValueError):
            return False
        return started.get("chunk_size") == chunk_size and started.get("inputs") == self.inputs

    def done_chunks(self, chunk_size: int) -> int:
        """How many leading chunks of a partial entry can be reused (same chunk size only)."""
        if not self.resumable(chunk_size):
            return 0
        count = 0
        while self.has_chunk(count):
            count += 1
        return count

    def chunk_ids(self, index: int) -> list[str] | None:
        """The doc_ids of a whole chunk `index`, or None (missing or unreadable)."""
        if not self.has_chunk(index):
            return None
        try:
            doc_ids = json.loads(self._chunk(index)[1].read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc_ids if isinstance(doc_ids, list) else None

    def stored(self, index: int, doc_ids: list[str]) -> tuple[list[str], np.ndarray] | None:
        """What a partial entry holds of chunk `index` (the `harness.retrieval.encode.ChunkStore` protocol).

        Returns:
            The whole chunk when it is stored with exactly `doc_ids`; else the pieces a killed run
            checkpointed (their ids, all among `doc_ids`, and vectors); else None.
        """
        if self.has_chunk(index):
            try:
                stored_ids, vectors = self.read_chunk(index)
                if stored_ids == doc_ids:
                    return stored_ids, vectors
            except CacheCorrupt:
                pass
        return self._pieces(index, set(doc_ids))

    def _pieces(self, index: int, wanted: set[str]) -> tuple[list[str], np.ndarray] | None:
        import numpy as np

        ids: list[str] = []
        blocks = []
        for ids_path in sorted(self.root.glob(f"chunk-{index:05d}.piece-*.ids.json")):
            try:
                piece_ids = json.loads(ids_path.read_text(encoding="utf-8"))
                vectors = np.load(ids_path.with_name(ids_path.name[: -len(".ids.json")] + ".npy"), allow_pickle=False)
            except (OSError, ValueError) as exc:
                logger.debug("ignoring an unreadable checkpoint %s: %s", ids_path, exc)
                continue
            usable = (
                isinstance(piece_ids, list)
                and vectors.dtype == np.float32
                and vectors.ndim == 2
                and len(piece_ids) == len(vectors)
                and wanted.issuperset(piece_ids)
                and (not blocks or vectors.shape[1] == blocks[0].shape[1])
            )
            if usable:
                ids += piece_ids
                blocks.append(vectors)
        if not blocks:
            return None
        logger.info("resuming chunk %d from %d checkpointed documents", index, len(ids))
        return ids, np.concatenate(blocks)

    def write_piece(self, index: int, name: str, doc_ids: list[str], vectors: np.ndarray) -> None:
        """Store a checkpoint of chunk `index` (vectors first, then ids: ids present means whole); with a `store`,
        nothing: its checkpoints are the texts the store holds."""
        import numpy as np

        if not self.writable or self.store is not None:
            return
        stem = f"chunk-{index:05d}.piece-{name}"
        try:
            with atomic_writer(self.root / f"{stem}.npy", "wb") as handle:
                np.save(handle, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
            with atomic_writer(self.root / f"{stem}.ids.json") as handle:
                json.dump(list(doc_ids), handle, ensure_ascii=False)
        except OutputError as exc:
            self._disable(exc)

    def _drop_pieces(self, index: int) -> None:
        # Ids files first: a piece without its ids file is never read.
        for suffix in (".ids.json", ".npy"):
            for path in self.root.glob(f"chunk-{index:05d}.piece-*{suffix}"):
                path.unlink(missing_ok=True)

    def has_chunk(self, index: int) -> bool:
        """Whether chunk `index` was written whole (its ids file is written last)."""
        return all(p.is_file() for p in self._chunk(index))

    def start(self, chunk_size: int) -> None:
        """Begin (or continue) writing this entry with chunks of `chunk_size` documents.

        A partial entry started with another chunk size is restarted: its chunks cover other
        documents, so none of them can be reused.
        """
        if not self.writable:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if remove_stale_temporaries(self.root):
                logger.info("removed temporary files of an interrupted run in %s", self.root)
            if (self.root / "key.json").is_file() and not self.resumable(chunk_size) and not self.complete:
                for path in self.root.glob("chunk-*"):
                    path.unlink()
                (self.root / "key.json").unlink()
            if not (self.root / "key.json").is_file():
                write_json(
                    {
                        "format": CACHE_FORMAT,
                        "chunk_size": chunk_size,
                        "inputs": self.inputs,
                        "labels": self.labels,
                        **({"store": self.store.folder.name} if self.store is not None else {}),
                    },
                    self.root / "key.json",
                )
        except (OSError, OutputError) as exc:
            self._disable(exc)

    def _disable(self, exc: Exception) -> None:
        logger.warning("embedding cache %s is not writable (%s); continuing without caching", self.root, exc)
        self.writable = False
        self.unwritable = not_writable(self.root.parent.parent, exc)

    def write_chunk(
        self, index: int, doc_ids: Sequence[str], vectors: np.ndarray, strict: bool = False, digests=None
    ) -> None:
        """Store one chunk atomically (vectors first, then ids: ids present means the chunk is whole).

        Args:
            strict: Raise OutputError when the chunk cannot be written (a Ray worker must not lose
                a shard silently); by default the cache is turned off with a warning instead.
            digests: With a `store`, the documents' text digests (`text_digests`): the vectors the store lacks
                go into it, and the chunk names them.
        """
        import numpy as np

        if self.writable and self.store is not None:
            self._keep(vectors, digests)
        if not self.writable:
            if strict:
                raise OutputError(f"the embedding cache {self.root} is not writable")
            return
        vectors_path, ids_path = self._chunk(index)
        try:
            with atomic_writer(vectors_path, "wb") as handle:
                if self.store is not None:
                    np.save(handle, np.ascontiguousarray(digests, dtype=np.uint64), allow_pickle=False)
                elif self.sparse:
                    np.savez(
                        handle,
                        data=vectors.data.astype(np.float32),
                        indices=vectors.indices.astype(np.int32),
                        indptr=vectors.indptr.astype(np.int64),
                        shape=np.asarray(vectors.shape, np.int64),
                    )
                else:
                    np.save(handle, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
            with atomic_writer(ids_path) as handle:
                json.dump(list(doc_ids), handle, ensure_ascii=False)
        except OutputError as exc:
            if strict:
                raise
            self._disable(exc)
            return
        self._drop_pieces(index)

    def read_chunk(
        self, index: int, expected_sha: str | None = None, mmap: bool = False
    ) -> tuple[list[str], np.ndarray]:
        """Load one chunk, checking its bytes, dtype and shape.

        With `mmap`, the vectors are a read-only memory map of the chunk file: their pages belong
        to the page cache, which the kernel can drop and re-read, instead of to this process.

        Raises:
            CacheCorrupt: The chunk is missing, damaged or inconsistent.
        """
        import numpy as np

        vectors_path, ids_path = self._chunk(index)
        try:
            if expected_sha is not None and _sha256(vectors_path) != expected_sha:
                raise CacheCorrupt(f"{vectors_path}: content differs from the manifest")
            if self.sparse:
                return self._read_rows(vectors_path, json.loads(ids_path.read_text(encoding="utf-8")))
            vectors = np.load(vectors_path, mmap_mode="r" if mmap else None, allow_pickle=False)
            doc_ids = json.loads(ids_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError) as exc:
            raise CacheCorrupt(f"{vectors_path}: unreadable ({exc})") from None
        if self.store is not None:
            if vectors.dtype != np.uint64 or vectors.shape != (len(doc_ids), 3):
                raise CacheCorrupt(f"{vectors_path}: shape {vectors.shape} / {vectors.dtype} for {len(doc_ids)} ids")
            vectors = self.store.gather(np.asarray(vectors))
            if vectors is None:
                raise CacheCorrupt(f"{vectors_path}: vectors missing from {self.store.folder} (pruned or damaged)")
            if not mmap and isinstance(vectors, np.memmap):
                vectors = np.array(vectors)
        if vectors.dtype != np.float32 or vectors.ndim != 2 or vectors.shape[0] != len(doc_ids):
            raise CacheCorrupt(f"{vectors_path}: shape {vectors.shape} / {vectors.dtype} for {len(doc_ids)} ids")
        return doc_ids, vectors

    @staticmethod
    def _read_rows(path: Path, doc_ids: list[str]):
        import numpy as np
        import scipy.sparse

        with np.load(path, allow_pickle=False) as parts:
            rows = scipy.sparse.csr_matrix(
                (parts["data"], parts["indices"], parts["indptr"]), shape=tuple(int(n) for n in parts["shape"])
            )
        if rows.dtype != np.float32 or rows.shape[0] != len(doc_ids):
            raise CacheCorrupt(f"{path}: shape {rows.shape} / {rows.dtype} for {len(doc_ids)} ids")
        return doc_ids, rows

    def finish(self, n_chunks: int, n_rows: int, dimension: int) -> None:
        """Write the manifest: from now on the entry is complete and verified on every read."""
        if not self.writable:
            return
        try:
            shas = [_sha256(self._chunk(i)[0]) for i in range(n_chunks)]
            write_json(
                {
                    "format": CACHE_FORMAT,
                    "chunks": n_chunks,
                    "rows": n_rows,
                    "dimension": dimension,
                    "sha256": shas,
                    "inputs": self.inputs,
                },
                self.root / "manifest.json",
            )
        except (OSError, OutputError) as exc:
            self._disable(exc)

    def chunks(self, mmap: bool = False) -> Iterator[tuple[list[str], np.ndarray]]:
        """Every chunk of a complete entry, verified against the manifest (memory-mapped with `mmap`).

        Raises:
            CacheCorrupt: Any mismatch (the caller drops the entry and recomputes).
        """
        try:
            manifest = json.loads((self.root / "manifest.json").read_text(encoding="utf-8"))
            shas = manifest["sha256"]
            expected_rows, dimension = manifest["rows"], manifest["dimension"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CacheCorrupt(f"{self.root}: unreadable manifest ({exc})") from None
        with contextlib.suppress(OSError):  # last used now: `cache prune --older-than` goes by it
            os.utime(self.root / "manifest.json")
        rows = 0
        for index, sha in enumerate(shas):
            doc_ids, vectors = self.read_chunk(index, sha, mmap=mmap)
            if vectors.shape[1] != dimension:
                raise CacheCorrupt(f"{self.root}: chunk {index} has dimension {vectors.shape[1]}, not {dimension}")
            rows += len(doc_ids)
            yield doc_ids, vectors
        if rows != expected_rows:
            raise CacheCorrupt(f"{self.root}: {rows} rows, the manifest says {expected_rows}")

    def drop(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _keep(self, vectors: np.ndarray, digests: np.ndarray) -> None:
        """Put the vectors the store lacks into it."""
        missing = ~self.store.holds(digests)
        self.store.add((), vectors[missing], digests[missing])
        if not self.store.writable:
            self._disable(OutputError(f"{self.store.folder} is not writable"))

    def migrate(self) -> None:
        """Move the vectors of an entry an earlier version wrote (its own ``chunk-00000.npy`` files, checkpoint
        pieces) into the `store`, once, under a lock: each vector is found there by its checksum (the earlier
        version stored every vector by text too; one not found goes in under a digest of this entry and its doc
        id), the chunks become digests, the manifest is rewritten, then the old files go. Pieces just go: their
        texts are in the store. Interrupted, it is simply done again."""
        import numpy as np

        old = [*self.root.glob("chunk-?????.npy"), *self.root.glob("chunk-*.piece-*")]
        if self.store is None or not old:
            return
        lock = None
        try:
            lock = hold_lock(self.root.parent.parent / "locks" / f"migrate-{self.key}.lock")
            old = sorted(self.root.glob("chunk-?????.npy"))
            shas = json.loads((self.root / "manifest.json").read_text())["sha256"] if self.complete else []
            known: dict[int, np.ndarray] = {}
            for segment in self.store.segments():
                with contextlib.suppress(OSError, ValueError), np.errstate(over="ignore"):
                    keys, meta, _, _ = segment.arrays()
                    known.update(zip((meta[:, 2] - keys).tolist(), np.column_stack([keys, meta[:, :2]])))
            rows, dimension = 0, 0
            for index, path in enumerate(old):
                if shas and _sha256(path) != shas[index]:
                    raise ValueError(f"{path}: content differs from the manifest")
                vectors = np.load(path, allow_pickle=False)
                doc_ids = json.loads(path.with_name(path.name[:-4] + ".ids.json").read_text(encoding="utf-8"))
                sums = row_checksums(vectors, np.zeros(len(vectors), np.uint64)).tolist()
                pseudo = text_digests([f"\0{self.key}\0{doc_id}" for doc_id in doc_ids])
                digests = np.stack([known.get(s, p) for s, p in zip(sums, pseudo)]).astype(np.uint64)
                self._keep(vectors, digests)
                with atomic_writer(path.with_name(path.name[:-4] + ".keys.npy"), "wb") as handle:
                    np.save(handle, digests, allow_pickle=False)
                rows, dimension = rows + len(vectors), vectors.shape[1]
            if self.complete:
                self.finish(len(old), rows, dimension)
            key = json.loads((self.root / "key.json").read_text(encoding="utf-8"))
            write_json({**key, "store": self.store.folder.name}, self.root / "key.json")
            if not self.writable:
                raise OutputError(self.unwritable)
            for path in [*old, *self.root.glob("chunk-*.piece-*")]:
                path.unlink()
        except (OSError, ValueError, OutputError) as exc:
            logger.warning("cannot move the cache entry %s into the store (%s); recomputing it", self.root, exc)
            self.drop()
            return
        finally:
            if lock is not None:
                lock.release(remove=True)
        logger.info("moved the vectors of the cache entry %s (written by an earlier version) into its store", self.root)


def not_writable(root: Path, exc: BaseException) -> str:
    """Why nothing could be written under the cache `root`, from the failed write's error (or its cause):
    ``<root> is read-only``, ``<root> is not writable (permission denied)``, or ``<root>: <the error>``."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__ or exc
    code = getattr(cause, "errno", None)
    if code == errno.EROFS:
        return f"{root} is read-only"
    if code in (errno.EACCES, errno.EPERM):
        return f"{root} is not writable (permission denied)"
    return f"{root}: {getattr(cause, 'strerror', None) or cause}"


def cache_record(cache: bool, hit: bool, entry: EmbeddingEntry | None) -> str:
    """What a result records as ``embedding_cache``: ``hit`` (the corpus vectors came from the cache), ``off``
    (no cache asked for), ``stored`` (they were written to `entry`), or ``not stored: <why>`` (the cache could
    not be written, or the encoder has no identity to key its vectors by): never ``stored`` for nothing."""
    if hit:
        return "hit"
    if not cache:
        return "off"
    if entry is None:
        return "not stored: the encoder has no stable identity to key its vectors by"
    if not entry.writable or not entry.complete:
        return f"not stored: {entry.unwritable or f'{entry.root} was not completed'}"
    return "stored"


def embedding_entry(
    root: Path, inputs: Mapping[str, Any], labels: Mapping[str, Any] | None = None, sparse: bool = False
) -> EmbeddingEntry:
    """The cache entry for `inputs` (which need not exist yet); `labels` (dataset name...) only inform listings.

    A model's corpus or query entry keeps its vectors in the model's store by text (`text_store_of`); one an
    earlier version wrote is moved there now (`EmbeddingEntry.migrate`)."""
    inputs = dict(inputs)
    store = None if sparse else text_store_of(root, inputs)
    entry = EmbeddingEntry(
        root / "embeddings" / content_key(inputs), inputs, dict(labels or {}), sparse=sparse, store=store
    )
    entry.migrate()
    return entry


def text_store_of(root: Path, inputs: Mapping[str, Any]) -> TextStore | None:
    """The store by text of a dense corpus or query entry's `inputs` (`harness.io.cache.texts.text_stores`)."""
    if inputs.get("kind") not in ("corpus", "queries") or "model" not in inputs or inputs.get("dtype") != "float32":
        return None
    common = {"model": inputs["model"], "dtype": "float32"}
    rule = {"text_rule": inputs.get("text_rule")} if inputs["kind"] == "corpus" else {}
    return TextStore(root, {"kind": "doc" if inputs["kind"] == "corpus" else "query", **rule, **common})
