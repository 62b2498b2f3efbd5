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
``train_size``) once all are known. faiss is imported only when an index is built. A flat index
takes its tops from the exact top-k of `harness.retrieval.index.exact`.
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
from harness.retrieval.index.exact import ScanWork, exact_top, scan_top

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
