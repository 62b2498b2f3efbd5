"""Vector indexes with FAISS on the CPU: exact search and the usual approximations.

With normalized vectors, inner product is cosine similarity; every index here scores by inner
product. `VectorIndex` keeps the doc_ids beside the FAISS index (FAISS knows only row numbers)
and turns search results into a `Run` ranked by the trec_eval rule.

Kinds (`IndexSpec.kind`):

* ``flat`` — exact (``IndexFlatIP``); the default and the reference for the others.
* ``hnsw`` — graph search (``IndexHNSWFlat``): ``hnsw_m`` links per node, ``ef_construction``,
  ``ef_search``.
* ``ivf`` — inverted lists over ``nlist`` k-means cells (``IndexIVFFlat``), ``nprobe`` cells searched.
* ``ivfpq`` — ``ivf`` with product-quantized vectors (``pq_m`` sub-vectors of ``pq_nbits`` bits).
* ``pq`` — product quantization alone (``IndexPQ``), exhaustive.
* ``sq8`` — 8-bit scalar quantization (``IndexScalarQuantizer``), exhaustive.

The trained kinds (ivf, ivfpq, pq, sq8) train on a sample of the vectors (at most
``train_size``) once all are known. faiss is imported only when an index is built.
"""

from __future__ import annotations

import logging
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError, MissingDependencyError, setting
from harness.records import Run

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

INDEX_KINDS = ("flat", "hnsw", "ivf", "ivfpq", "pq", "sq8")
TRAINED = {"ivf", "ivfpq", "pq", "sq8"}


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise MissingDependencyError("faiss is not installed (pip install faiss-cpu)") from exc
    return faiss


class IndexConfigError(HarnessError):
    """An unknown index kind or a parameter out of range."""


@dataclass(frozen=True)
class IndexSpec:
    """Which index to build and its parameters (recorded in every result's config).

    Attributes:
        kind: One of `INDEX_KINDS`.
        hnsw_m: HNSW links per node (4–128).
        ef_construction: HNSW build-time beam width.
        ef_search: HNSW search-time beam width (raised to the search depth when smaller).
        nlist: IVF cells; None means ``min(4·√n, n/39)`` (FAISS wants ≥ 39 training points a cell).
        nprobe: IVF cells searched per query.
        pq_m: PQ sub-vectors; must divide the dimension.
        pq_nbits: Bits per PQ code (4–16).
        train_size: Most vectors used to train ivf/pq/sq8.
        seed: Seed of the training sample.
    """

    kind: str = "flat"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    nlist: int | None = None
    nprobe: int = 16
    pq_m: int = 48
    pq_nbits: int = 8
    train_size: int = 262_144
    seed: int = 0

    def check(self, dimension: int | None = None) -> None:
        """Validate the parameters (and, given the vector dimension, that PQ can split it).

        Raises:
            IndexConfigError: Unknown kind or a parameter out of range.
        """
        if self.kind not in INDEX_KINDS:
            raise IndexConfigError(f"unknown index {self.kind!r}; use one of {', '.join(INDEX_KINDS)}")
        bounds = {
            "hnsw_m": (4, 128),
            "ef_construction": (1, 10_000),
            "ef_search": (1, 100_000),
            "nprobe": (1, 1 << 20),
            "pq_m": (1, 4096),
            "pq_nbits": (4, 16),
            "train_size": (1, 1 << 30),
        }
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise IndexConfigError(f"{setting(name)} {value} is out of range [{low}, {high}]")
        if self.nlist is not None and self.nlist < 1:
            raise IndexConfigError(f"{setting('nlist')} {self.nlist} must be at least 1")
        if dimension is not None and self.kind in ("ivfpq", "pq") and dimension % self.pq_m:
            divisors = [m for m in range(1, dimension + 1) if dimension % m == 0 and m <= 128]
            raise IndexConfigError(
                f"{setting('pq_m')} {self.pq_m} must divide the dimension {dimension} "
                f"(e.g. {', '.join(map(str, divisors[-6:]))})"
            )

    def to_config(self) -> dict[str, Any]:
        """The parameters that matter for this kind, for the result's config."""
        keep = {
            "flat": (),
            "hnsw": ("hnsw_m", "ef_construction", "ef_search"),
            "ivf": ("nlist", "nprobe"),
            "ivfpq": ("nlist", "nprobe", "pq_m", "pq_nbits"),
            "pq": ("pq_m", "pq_nbits"),
            "sq8": (),
        }[self.kind]
        data = asdict(self)
        return {"index": self.kind, **{name: data[name] for name in keep}}


class DocIds(Sequence[str]):
    """doc_ids in FAISS row order, kept compactly: one UTF-8 buffer and an array of end offsets.

    A Python list of 8.8M short strings (MS MARCO) costs ~65 bytes per id; this costs the id's
    bytes plus 8, so the ids of a large corpus do not outgrow its index. Reading an id back
    decodes it, which search does only for the rows it returns.
    """

    def __init__(self, doc_ids: Iterable[str] = ()):
        self._buffer = bytearray()
        self._ends = array("q")
        self.extend(doc_ids)

    def extend(self, doc_ids: Iterable[str]) -> None:
        """Append ids (one chunk at a time: a list of a chunk's encoded ids exists only here)."""
        encoded = [doc_id.encode("utf-8") for doc_id in doc_ids]
        offset = len(self._buffer)
        for item in encoded:
            offset += len(item)
            self._ends.append(offset)
        self._buffer += b"".join(encoded)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, row):  # type: ignore[override]
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        if row < 0:
            row += len(self._ends)
        start = self._ends[row - 1] if row > 0 else 0
        return self._buffer[start : self._ends[row]].decode("utf-8")

    def nbytes(self) -> int:
        """Memory held, in bytes (the buffer and the offsets)."""
        return len(self._buffer) + self._ends.itemsize * len(self._ends)


def default_nlist(n: int) -> int:
    """``min(4·√n, n/39)``, at least 1."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


class RowIndex:
    """What every vector index shares: doc_ids in row order, and the shape check of an added chunk."""

    dimension: int
    _doc_ids: DocIds
    _index: Any
    nlist: int | None = None  # IVF's cell count, once built

    def build(self) -> None:
        """Make the FAISS index searchable (train, quantize...); a no-op when it is."""

    def __len__(self) -> int:
        return len(self._doc_ids)

    @property
    def doc_ids(self) -> Sequence[str]:
        """The doc_ids, in the order their vectors were added (FAISS row order)."""
        return self._doc_ids

    def facts(self) -> dict[str, float]:
        """What a result records of the built index: its serialized size and bytes per document (size / documents) and
        the parameters it resolved itself (IVF's cell count, the int8 calibration's documents)."""
        self.build()
        size = serialized_size(self._index)
        facts = {"bytes_per_doc": size / max(1, len(self)), "index_bytes": size}
        if self.nlist is not None:
            facts["nlist"] = self.nlist  # the cell count actually used (the default depends on n)
        return facts

    def _check_chunk(self, doc_ids: Sequence[str], vectors: np.ndarray) -> None:
        if vectors.shape != (len(doc_ids), self.dimension):
            raise ValueError(f"vectors of shape {vectors.shape} for {len(doc_ids)} ids of dimension {self.dimension}")


class VectorIndex(RowIndex):
    """A FAISS inner-product index of one kind, with its doc_ids.

    Vectors are added chunk by chunk. Flat and HNSW indexes take them at once; trained kinds
    keep them until `build` trains on a sample and adds them all.
    """

    def __init__(self, dimension: int, spec: IndexSpec = IndexSpec()):
        spec.check(dimension)
        self.spec = spec
        self.dimension = dimension
        self._doc_ids = DocIds()
        self._pending: list[np.ndarray] = []
        self._index: Any = None
        self.work = ScanWork()  # what flat searches scanned (`TopScan`): tiles, rows, merges
        faiss = _faiss()
        if spec.kind == "flat":
            self._index = faiss.IndexFlatIP(dimension)
        elif spec.kind == "hnsw":
            self._index = faiss.IndexHNSWFlat(dimension, spec.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self._index.hnsw.efConstruction = spec.ef_construction
            self._index.hnsw.efSearch = spec.ef_search

    def reserve(self, rows: int) -> None:
        """Allocate a flat index's storage for `rows` vectors at once (a no-op for other kinds).

        FAISS grows its storage as chunks arrive, and each reallocation holds the old copy and the new
        one: up to twice the vectors' bytes at the last one. Reserved up front, the peak is the vectors.
        """
        if self.spec.kind != "flat" or rows <= self._index.ntotal:
            return
        codes, size = self._index.codes, self._index.codes.size()
        codes.resize(rows * self.dimension * 4)  # std::vector: the capacity stays when it shrinks back
        codes.resize(size)

    def add(self, doc_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add one chunk of vectors (float32, shape (len(doc_ids), dimension))."""
        import numpy as np

        self._check_chunk(doc_ids, vectors)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self._index is not None:
            self._index.add(vectors)
        else:
            self._pending.append(vectors)
        self._doc_ids.extend(doc_ids)

    def build(self) -> None:
        """Train a trained kind on a sample of everything added, then add it all (no-op otherwise)."""
        if self._index is not None:
            return
        faiss = _faiss()
        n = sum(len(chunk) for chunk in self._pending)
        if n == 0:
            raise IndexConfigError("cannot train an index on an empty corpus")
        spec = self.spec
        if spec.kind in ("ivfpq", "pq") and n < 2**spec.pq_nbits:
            raise IndexConfigError(
                f"PQ with {spec.pq_nbits}-bit codes needs at least {2**spec.pq_nbits} documents "
                f"to train, the corpus has {n}; lower --pq-nbits or use --index flat"
            )
        if spec.kind in ("ivf", "ivfpq"):
            self.nlist = spec.nlist or default_nlist(n)
            if self.nlist > n:
                raise IndexConfigError(f"{setting('nlist')} {self.nlist} exceeds the {n} documents; lower it")
            quantizer = faiss.IndexFlatIP(self.dimension)
            if spec.kind == "ivf":
                index = faiss.IndexIVFFlat(quantizer, self.dimension, self.nlist, faiss.METRIC_INNER_PRODUCT)
            else:
                index = faiss.IndexIVFPQ(
                    quantizer, self.dimension, self.nlist, spec.pq_m, spec.pq_nbits, faiss.METRIC_INNER_PRODUCT
                )
            index.nprobe = min(spec.nprobe, self.nlist)
        elif spec.kind == "pq":
            index = faiss.IndexPQ(self.dimension, spec.pq_m, spec.pq_nbits, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexScalarQuantizer(
                self.dimension, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
            )
        index.train(self._sample(n))
        for chunk in self._pending:  # chunk by chunk: no concatenated copy of every vector
            index.add(chunk)
        self._index = index
        # The chunks stay (they are the exact vectors) until search has measured recall of exact.

    def _sample(self, n: int) -> np.ndarray:
        """At most `train_size` rows drawn uniformly (fixed seed) across the pending chunks."""
        import numpy as np

        if n <= self.spec.train_size:
            return np.concatenate(self._pending)
        rows = np.sort(np.random.default_rng(self.spec.seed).choice(n, self.spec.train_size, replace=False))
        picked, start = [], 0
        for chunk in self._pending:
            inside = rows[(rows >= start) & (rows < start + len(chunk))] - start
            picked.append(chunk[inside])
            start += len(chunk)
        return np.concatenate(picked)

    def search(self, query_ids: Sequence[str], vectors: np.ndarray, depth: int, name: str = "run") -> Run:
        """Retrieve the `depth` highest-scoring documents for each query.

        Returns:
            A Run ranked by score, ties by doc_id descending (trec_eval's order). A flat index keeps, at
            the cut, the same rule (among equal scores the greater doc_ids), and scores as `exact_top`
            computes them: the same bits on any machine, thread count or sharding.
        """
        import numpy as np

        self.build()
        depth = min(depth, len(self))
        if depth <= 0 or len(query_ids) == 0:
            return Run.from_scores({query_id: {} for query_id in query_ids}, name=name)
        if self.spec.kind == "hnsw" and self._index.hnsw.efSearch < depth:
            self._index.hnsw.efSearch = depth  # HNSW cannot return more than efSearch results
        queries = np.ascontiguousarray(vectors, dtype=np.float32)
        doc_ids = self._doc_ids
        if self.spec.kind == "flat":  # the same bits however the corpus is ordered or sharded (`exact_top`)
            stored = _faiss().rev_swig_ptr(self._index.get_xb(), len(self) * self.dimension)
            stored = stored.reshape(len(self), self.dimension)  # a view of FAISS's own copy, nothing copied
            scores, rows = exact_top(
                lambda some, k: scan_top(some, [stored], k, work=self.work),
                queries,
                len(self),
                depth,
                doc_ids.__getitem__,
                stored.__getitem__,
            )
        else:
            scores, rows = self._index.search(queries, depth)
        results = {}
        for query_id, query_scores, query_rows in zip(query_ids, scores.tolist(), rows.tolist()):
            # FAISS pads with row -1 when it has fewer than `depth` results.
            results[query_id] = {doc_ids[row]: score for row, score in zip(query_rows, query_scores) if row >= 0}
        return Run.adopt(results, name=name)

    def exact_search(self, query_ids: Sequence[str], vectors: np.ndarray, depth: int) -> Run:
        """Exact inner-product search over the same vectors, to measure what the approximation cost.

        Needs no second index: flat is exact; HNSW keeps the full vectors in its flat storage; the
        trained kinds search the chunks they were built from, one chunk at a time, merging the top-k.
        """
        import numpy as np

        self.build()
        if self.spec.kind == "flat":
            return self.search(query_ids, vectors, depth)
        faiss = _faiss()
        queries = np.ascontiguousarray(vectors, dtype=np.float32)
        depth = min(depth, len(self))
        if self.spec.kind == "hnsw":
            storage = faiss.downcast_index(self._index.storage)
            scores, rows = storage.search(queries, depth)
        else:
            if not self._pending:
                raise ValueError("the vectors this index was built from are gone; exact search is not possible")
            scores, rows = exact_knn(self._pending, queries, depth)
        doc_ids = self._doc_ids
        return Run.adopt(
            {
                query_id: {doc_ids[row]: score for row, score in zip(r, s) if row >= 0}
                for query_id, s, r in zip(query_ids, scores.tolist(), rows.tolist())
            }
        )

    def attach_vectors(self, chunks: Sequence[np.ndarray]) -> None:
        """Give a loaded trained index the vectors it was built from (for `exact_search`)."""
        self._pending = list(chunks)

    def save(self, path: Path) -> None:
        """Write the built FAISS index atomically (FAISS's own format; no pickle)."""
        import numpy as np

        from harness.io.files import atomic_writer

        self.build()
        data = np.asarray(_faiss().serialize_index(self._index))
        with atomic_writer(path, "wb") as handle:
            handle.write(data.tobytes())

    @classmethod
    def load(cls, path: Path, dimension: int, spec: IndexSpec, doc_ids: Sequence[str]) -> VectorIndex:
        """Read an index written by `save` for these doc_ids.

        Raises:
            ValueError: The file is unreadable or does not fit (size, dimension).
        """
        import numpy as np

        try:
            faiss_index = _faiss().deserialize_index(np.fromfile(path, dtype=np.uint8))
        except (OSError, RuntimeError) as exc:
            raise ValueError(f"{path}: unreadable index ({exc})") from None
        if faiss_index.ntotal != len(doc_ids) or faiss_index.d != dimension:
            raise ValueError(
                f"{path}: {faiss_index.ntotal} vectors of dimension {faiss_index.d}, "
                f"expected {len(doc_ids)} of {dimension}"
            )
        index = cls(dimension, spec)
        index._index = faiss_index
        index._doc_ids = doc_ids if isinstance(doc_ids, DocIds) else DocIds(doc_ids)
        if spec.kind in ("ivf", "ivfpq"):
            index.nlist = faiss_index.nlist
        return index


def exact_knn(chunks: Sequence[np.ndarray], queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows) of the exact inner-product top-`depth` over vectors held in chunks, one chunk at a
    time (no concatenated copy), merging each chunk's top into the running one."""
    import numpy as np

    faiss = _faiss()
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    start = 0
    for chunk in chunks:
        chunk_scores, chunk_rows = faiss.knn(
            queries,
            np.ascontiguousarray(chunk, dtype=np.float32),
            min(depth, len(chunk)),
            metric=faiss.METRIC_INNER_PRODUCT,
        )
        best_scores = np.hstack([best_scores, chunk_scores])
        best_rows = np.hstack([best_rows, chunk_rows + start])
        keep = np.argsort(-best_scores, axis=1, kind="stable")[:, :depth]
        best_scores = np.take_along_axis(best_scores, keep, axis=1)
        best_rows = np.take_along_axis(best_rows, keep, axis=1)
        start += len(chunk)
    return best_scores, best_rows


SCAN_TILE = 1024  # documents multiplied at once (what `harness.retrieval.streamed.plan_search` counts)
SCAN_QUERIES = 1024  # queries multiplied at once, at most
MERGE_BYTES = 4 << 20  # the most the merge of one tile's candidates holds at once


@dataclass
class ScanWork:
    """What a `TopScan` did: GEMM tiles multiplied, document rows scanned (each once per pass), the (query, tile)
    pairs that had a score above the query's running cut, and the candidates admitted past it."""

    tiles: int = 0
    rows: int = 0
    merged: int = 0
    admitted: int = 0


class TopScan:
    """The running float32 top-k of every query over document blocks met one at a time, in row order.

    Each tile of a block is multiplied with a block of queries (numpy's sgemm), and only the scores above a query's
    running cut (its k-th best score so far, carried from block to block) are merged into its top-k: after the first
    tiles few are, so the cost is the GEMM's, whether the documents come as one array or as many chunks.
    Which of several documents tied at the k-th score are kept is not decided here
    (`exact_top` rescores the candidates and settles the cut).
    """

    def __init__(self, queries: np.ndarray, k: int, query_block: int = SCAN_QUERIES, work: ScanWork | None = None):
        import numpy as np

        self.queries = np.ascontiguousarray(queries, dtype=np.float32)
        self.k, self.query_block, self.seen = k, max(1, min(query_block, SCAN_QUERIES)), 0
        self.work = work if work is not None else ScanWork()
        self.scores = np.full((len(self.queries), k), -np.inf, dtype=np.float32)
        self.rows = np.full((len(self.queries), k), -1, dtype=np.int64)
        self.cut = np.full(len(self.queries), -np.inf, dtype=np.float32)

    def add(self, block: np.ndarray) -> None:
        """Scan the next `block` of document vectors (float32 (rows, dim); a memory map is read once)."""
        import numpy as np

        block = np.asarray(block, dtype=np.float32)
        for begin in range(0, len(block), SCAN_TILE):
            tile = np.ascontiguousarray(block[begin : begin + SCAN_TILE])
            for first in range(0, len(self.queries), self.query_block):
                scores = self.queries[first : first + self.query_block] @ tile.T
                self._merge(first, scores, self.seen + begin)
                self.work.tiles += 1
        self.work.rows += len(block)
        self.seen += len(block)

    def _merge(self, first: int, scores: np.ndarray, first_row: int) -> None:
        """Merge the scores of one tile above the running cuts of queries `first`, `first` + 1, ... into their tops
        (the queries in groups, so that what the merge holds stays under `MERGE_BYTES`)."""
        import numpy as np

        above = scores > self.cut[first : first + len(scores), None]
        if not above.any():
            return
        tile = scores.shape[1]
        group = max(1, MERGE_BYTES // ((self.k + tile) * 20))
        for low in range(0, len(scores), group):
            flat = np.flatnonzero(above[low : low + group])
            if flat.size:
                self._admit(first + low, scores[low : low + group], flat, first_row)

    def _admit(self, first: int, scores: np.ndarray, flat: np.ndarray, first_row: int) -> None:
        """Merge the entries `flat` (flat positions in `scores`, ascending) into the tops of queries `first`..."""
        import numpy as np

        local, column = np.divmod(flat, scores.shape[1])
        counts = np.bincount(local)
        hit = np.flatnonzero(counts)
        counts = counts[hit]
        slot = np.repeat(np.arange(len(hit)), counts)
        rank = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
        self.work.merged += len(hit)
        self.work.admitted += len(flat)
        k, queries = self.k, hit + first
        all_scores = np.full((len(hit), k + int(counts.max())), -np.inf, dtype=np.float32)
        all_rows = np.full(all_scores.shape, -1, dtype=np.int64)
        all_scores[:, :k], all_rows[:, :k] = self.scores[queries], self.rows[queries]
        all_scores[slot, k + rank] = scores[local, column]
        all_rows[slot, k + rank] = first_row + column
        keep = np.argpartition(-all_scores, k - 1, axis=1)[:, :k]
        self.scores[queries] = np.take_along_axis(all_scores, keep, axis=1)
        self.rows[queries] = np.take_along_axis(all_rows, keep, axis=1)
        self.cut[queries] = self.scores[queries].min(axis=1)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), (queries, k), best first; -1 rows (score -inf) when fewer than k documents were met."""
        import numpy as np

        order = np.argsort(-self.scores, axis=1, kind="stable")
        return np.take_along_axis(self.scores, order, axis=1), np.take_along_axis(self.rows, order, axis=1)


def scan_top(
    queries: np.ndarray, blocks: Iterable[np.ndarray], k: int, query_block: int = SCAN_QUERIES, work=None
) -> tuple[np.ndarray, np.ndarray]:
    """`TopScan` of `queries` over `blocks`: (scores, rows) of the float32 top-`k`, best first, rows global."""
    scan = TopScan(queries, k, query_block, work)
    for block in blocks:
        scan.add(block)
    return scan.result()


# FAISS finds the candidates; a document it scores within this fraction of the cut (relative to the cut's and the
# top score's size) may still belong in the top once scores are recomputed (its float32 scores differ from the
# exact ones by ~1e-7 on unit vectors, and by kernel and thread count), so it is a candidate.
RESCORE_MARGIN = 1e-5
RESCORE_BYTES = 8 << 20  # candidate vectors read back at once for rescoring (within streamed's SLACK_BYTES)


def _ranked(scores, rows, doc_id, depth: int) -> tuple[list[float], list[int]]:
    """One query's candidates in the run's order (score, then doc_id, descending), the first `depth`."""
    import numpy as np

    order = np.argsort(-scores, kind="stable")
    if len(order) <= depth or scores[order[depth]] != scores[order[depth - 1]]:
        return scores[order[:depth]].tolist(), rows[order[:depth]].tolist()  # the cut falls between two scores
    best = sorted(zip(scores.tolist(), (doc_id(row) for row in rows.tolist()), rows.tolist()), reverse=True)[:depth]
    return [score for score, _, _ in best], [row for _, _, row in best]


def exact_top(search, queries: np.ndarray, n: int, depth: int, doc_id, vectors) -> tuple[np.ndarray, np.ndarray]:
    """The exact top `depth` of every query over `n` vectors, the same bits wherever it runs.

    FAISS finds the candidates: every document it scores above the cut or within `RESCORE_MARGIN` of it
    (searching deeper until none is left out). Their scores are then recomputed one way — float64 dot
    products rounded to float32 — since FAISS's own float32 scores change in the last bits with its
    kernels, the thread count and the shape of the search (a shard vs the whole corpus). At the cut,
    among equal scores, the greater doc_ids are kept (the run's own tie order, trec_eval's), so the
    result is the first `depth` of the complete ranking whatever the order of the vectors (FAISS alone
    keeps whichever tie its heap met first).

    Args:
        search: FAISS search over the vectors, ``(queries, k) -> (scores, rows)``.
        queries: float32 query vectors.
        n: How many vectors `search` searches.
        depth: Documents kept per query.
        doc_id: row → doc_id (asked only where equal scores straddle the cut).
        vectors: rows (an int64 array) → their float32 vectors.

    Returns:
        (scores, rows), (queries, min(depth, n)); rows in no particular order within a query.
    """
    import numpy as np

    depth = min(depth, n)
    k = min(depth + 1 + depth // 8, n)  # a little deeper than kept: few queries need a second search
    scores, rows = search(queries, k)
    top_scores = np.empty((len(queries), depth), dtype=np.float32)
    top_rows = np.empty((len(queries), depth), dtype=np.int64)
    floors = scores[:, depth - 1] - RESCORE_MARGIN * (np.abs(scores[:, depth - 1]) + np.abs(scores[:, 0]))
    found = list(zip(scores, rows))
    wide, deeper = k, [i for i in range(len(queries)) if k < n and scores[i, -1] >= floors[i]]
    while deeper:  # a candidate may lie deeper than FAISS returned: those queries again, together (one pass of a
        wide = min(2 * wide, n)  # streamed search, `harness.retrieval.streamed`, for all of them)
        wider_scores, wider_rows = search(np.ascontiguousarray(queries[deeper]), wide)
        for position, i in enumerate(deeper):
            found[i] = (wider_scores[position], wider_rows[position])
        deeper = [i for position, i in enumerate(deeper) if wide < n and wider_scores[position, -1] >= floors[i]]
    candidates = [found_rows[found_scores >= floors[i]] for i, (found_scores, found_rows) in enumerate(found)]
    for group in rescore_groups([len(rows) for rows in candidates], queries.shape[1]):
        read = vectors(np.concatenate([candidates[i] for i in group]))  # one read-back per group, not per query
        start = 0
        for i in group:
            part, start = read[start : start + len(candidates[i])], start + len(candidates[i])
            exact = (np.asarray(part, dtype=np.float64) @ queries[i].astype(np.float64)).astype(np.float32)
            top_scores[i], top_rows[i] = _ranked(exact, candidates[i], doc_id, depth)
    return top_scores, top_rows


def rescore_groups(counts: Sequence[int], dimension: int, budget: int = RESCORE_BYTES) -> list[range]:
    """Consecutive queries whose candidates (`counts` rows each, float32 of `dimension`) are read back together:
    as many as `budget` bytes hold, at least one. A streamed search maps every chunk once per read-back, so reading
    each query's candidates alone cost a pass of chunk maps per query (BENCHMARKS.md, "Exact search at the chip's
    pace")."""
    groups, first, held = [], 0, 0
    for i, count in enumerate(counts):
        size = count * dimension * 4
        if i > first and held + size > budget:
            groups.append(range(first, i))
            first, held = i, 0
        held += size
    if first < len(counts):
        groups.append(range(first, len(counts)))
    return groups


def merge_top(parts: Sequence[tuple[np.ndarray, np.ndarray]], depth: int, doc_id) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-query tops over disjoint sets of rows, each `exact_top` of its set, into the top `depth` of
    their union by the same rule (score descending, then doc_id descending at the cut)."""
    import numpy as np

    scores = np.concatenate([part[0] for part in parts], axis=1)
    rows = np.concatenate([part[1] for part in parts], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")
    scores, rows = np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)
    if scores.shape[1] <= depth:
        return scores, rows
    tied = np.flatnonzero(scores[:, depth] == scores[:, depth - 1])
    scores, rows = scores[:, :depth].copy(), rows[:, :depth].copy()
    for i in tied:  # every candidate of this query, ranked by the full rule
        all_scores = np.concatenate([part[0][i] for part in parts])
        all_rows = np.concatenate([part[1][i] for part in parts])
        scores[i], rows[i] = _ranked(all_scores, all_rows, doc_id, depth)
    return scores, rows


def serialized_size(index: Any) -> int:
    """Bytes of a FAISS index (float or binary) in FAISS's own format, counted as written (nothing held)."""
    faiss = _faiss()
    written = [0]

    def count(data: bytes) -> int:
        written[0] += len(data)
        return len(data)

    writer = faiss.PyCallbackIOWriter(count)
    (faiss.write_index_binary if isinstance(index, faiss.IndexBinary) else faiss.write_index)(index, writer)
    return written[0]


def recall_of_exact(approximate: Run, exact: Run, depth: int) -> float:
    """Mean over queries of |approximate top-depth ∩ exact top-depth| / |exact top-depth|."""
    values = []
    for query_id, hits in exact.items():
        wanted = {hit.doc_id for hit in hits[:depth]}
        if not wanted:
            continue
        got = {hit.doc_id for hit in approximate.get(query_id, ())[:depth]}
        values.append(len(wanted & got) / len(wanted))
    return sum(values) / len(values) if values else 1.0
