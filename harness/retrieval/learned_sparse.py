"""Learned sparse retrieval: a sentence-transformers ``SparseEncoder`` (the SPLADE family) as a first stage.

Documents are encoded with ``encode_document`` and queries with ``encode_query`` into vocabulary-sized
vectors that are mostly zero; they are kept as sparse rows (scipy CSR: indices + float32 values), never
as a dense vocabulary-sized matrix. Retrieval is the exact dot product through an inverted index: the
corpus rows are stacked chunk by chunk, transposed once into a column-compressed matrix (one posting
list per vocabulary entry), and queries are scored in blocks; a document that shares no active
dimension with the query scores 0 and is not retrieved (as BM25 returns only documents sharing a term).
The top `depth` per query follows the trec_eval rule (score descending, ties by doc_id descending):
candidates tied at the cut are all kept until the run is ranked.

Reported with the result: mean active dimensions per document and per query, and the expected FLOPs of
one query-document dot product as the SPLADE papers define it, ``Σ_j p_j(query) · p_j(doc)`` with p_j
the fraction of queries (documents) whose dimension j is active.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError, MissingDependencyError, ModelLoadError
from harness.records import Run

if TYPE_CHECKING:
    import scipy.sparse

logger = logging.getLogger(__name__)


class SparseModel:
    """A loaded ``SparseEncoder`` with the fingerprint its cached rows are keyed by."""

    def __init__(
        self,
        name: str,
        source: str,
        batch_size: int = 32,
        device: str = "cpu",
        precision: str = "fp32",
        max_seq_length: int | None = None,
    ):
        try:
            from sentence_transformers import SparseEncoder
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise MissingDependencyError("learned sparse retrieval needs sentence-transformers ≥ 5") from exc
        try:
            self.model = SparseEncoder(source, device=device)
        except Exception as exc:  # noqa: BLE001 - hub, IO and config errors have no common base
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"cannot load sparse encoder {name!r}: {detail[:300]}") from exc
        from harness.retrieval.devices import torch_dtype

        self.model.to(torch_dtype(precision))
        if max_seq_length is not None:
            self.model.max_seq_length = max_seq_length
        self.name, self.batch_size, self.precision = name, batch_size, precision

    def fingerprint(self) -> dict[str, Any]:
        """Name, a sha256 of the weights, tokenizer, length, dimension and precision."""
        import torch

        digest = hashlib.sha256()
        for name, tensor in self.model.state_dict().items():
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        return {
            "name": self.name,
            "kind": "sparse",
            "weights_sha256": digest.hexdigest(),
            "tokenizer": type(self.model.tokenizer).__name__,
            "max_seq_length": self.model.max_seq_length,
            **({"precision": self.precision} if self.precision != "fp32" else {}),
        }

    def encode_docs(self, texts: Sequence[str]) -> scipy.sparse.csr_matrix:
        """Document rows (CSR, float32)."""
        return _csr(
            self.model.encode_document(
                list(texts), batch_size=self.batch_size, show_progress_bar=False, convert_to_sparse_tensor=True
            )
        )

    def encode_queries(self, texts: Sequence[str]) -> scipy.sparse.csr_matrix:
        """Query rows (CSR, float32)."""
        return _csr(
            self.model.encode_query(
                list(texts), batch_size=self.batch_size, show_progress_bar=False, convert_to_sparse_tensor=True
            )
        )


def _csr(tensor: Any) -> scipy.sparse.csr_matrix:
    """A torch sparse COO batch as CSR (float32, explicit zeros dropped); the width is the vocabulary's."""
    import numpy as np
    import scipy.sparse

    coo = tensor.coalesce().cpu()
    row, column = coo.indices().numpy()
    values = coo.values().float().numpy().astype(np.float32)
    keep = values != 0
    return scipy.sparse.csr_matrix((values[keep], (row[keep], column[keep])), shape=tuple(coo.shape), dtype=np.float32)


def postings_from_chunks(chunks: list[Any], dimension: int):
    """vocabulary × documents CSR from document-row CSR chunks, equal to ``vstack(chunks).T.tocsr()``.

    Built in place: the posting arrays are sized first from each dimension's count, then each
    chunk's entries are written at their dimension's cursor and the chunk is released. Peak: the rows and
    the postings (each chunk touches every dimension's pages), without scipy's stacked copy and its
    temporaries (-21 % at 1M documents, BENCHMARKS.md, "BM25 and learned-sparse indexing at scale")."""
    import numpy as np
    import scipy.sparse

    counts = np.zeros(dimension, dtype=np.int64)
    for chunk in chunks:
        counts += np.bincount(chunk.indices, minlength=dimension)
    nnz = int(counts.sum())
    index_dtype = np.int32 if max(nnz, sum(chunk.shape[0] for chunk in chunks)) < 2**31 else np.int64
    indptr = np.zeros(dimension + 1, dtype=index_dtype)
    np.cumsum(counts, out=indptr[1:])
    cursor = indptr[:-1].astype(np.int64)
    indices = np.empty(nnz, dtype=index_dtype)
    data = np.empty(nnz, dtype=chunks[0].dtype if chunks else np.float32)
    n_rows = 0
    while chunks:
        by_dimension = chunks.pop(0).tocsc()  # entries grouped by dimension, rows ascending in each
        columns = np.repeat(np.arange(dimension), np.diff(by_dimension.indptr))
        target = cursor[columns] + np.arange(by_dimension.nnz) - by_dimension.indptr[columns]
        indices[target] = by_dimension.indices + n_rows
        data[target] = by_dimension.data
        cursor += np.diff(by_dimension.indptr)
        n_rows += by_dimension.shape[0]
    return scipy.sparse.csr_matrix((data, indices, indptr), shape=(dimension, n_rows))


class SparseIndex:
    """Exact dot-product search over sparse document rows, through posting lists."""

    def __init__(self, dimension: int | None = None):
        self.dimension = dimension  # the vocabulary size; None: taken from the first rows added
        self.doc_ids: list[str] = []
        self._chunks: list[Any] = []
        self._postings = None

    def add(self, doc_ids: Sequence[str], rows: scipy.sparse.csr_matrix) -> None:
        self.dimension = self.dimension or rows.shape[1]
        if rows.shape[1] != self.dimension:
            raise HarnessError(f"sparse rows of width {rows.shape[1]} for an index of width {self.dimension}")
        self.doc_ids += list(doc_ids)
        self._chunks.append(rows)
        self._postings = None

    def __len__(self) -> int:
        return len(self.doc_ids)

    def _matrix(self):
        """vocabulary × documents, CSR: row j is dimension j's posting list (built once, chunks freed)."""

        if self._postings is None:
            self._postings = postings_from_chunks(self._chunks, self.dimension or 0)
            self._chunks = []
        return self._postings

    @property
    def postings(self):
        """vocabulary × documents, CSR: each dimension's posting list (documents in the order added)."""
        return self._matrix()

    def stats(self, queries: scipy.sparse.csr_matrix) -> dict[str, float]:
        """Mean active dimensions per document and per query, and expected FLOPs per dot product."""
        import numpy as np

        postings = self._matrix()
        n_docs = max(1, len(self))
        p_doc = np.diff(postings.indptr) / n_docs
        p_query = np.bincount(queries.indices, minlength=self.dimension) / max(1, queries.shape[0])
        return {
            "mean_active_dims_doc": float(postings.nnz / n_docs),
            "mean_active_dims_query": float(queries.nnz / max(1, queries.shape[0])),
            "expected_flops": float(np.dot(p_query, p_doc)),
        }

    def search(
        self,
        query_ids: Sequence[str],
        queries: scipy.sparse.csr_matrix,
        depth: int,
        block: int | None = None,
        name: str = "run",
    ) -> Run:
        """The top `depth` documents of each query by exact dot product (positive scores only).

        Each block of queries is multiplied with the posting lists (sparse × sparse: only the postings
        of a query's active dimensions are touched), so no dense queries × corpus matrix exists.
        """
        import numpy as np

        postings = self._matrix()
        doc_ids = self.doc_ids
        # A block's scores can touch most documents (frequent dimensions have long posting lists):
        # bound them to ~32M entries (~256 MB) whatever the corpus size.
        block = block or max(1, min(256, 32_000_000 // max(1, len(doc_ids))))
        results: dict[str, dict[str, float]] = {}
        for start in range(0, len(query_ids), block):
            scores = (queries[start : start + block] @ postings).tocsr()
            for offset in range(scores.shape[0]):
                lo, hi = scores.indptr[offset], scores.indptr[offset + 1]
                columns, values = scores.indices[lo:hi], scores.data[lo:hi]
                keep = values > 0
                columns, values = columns[keep], values[keep]
                if len(values) > depth:
                    cut = np.partition(values, -depth)[-depth]
                    chosen = values >= cut  # ties at the cut stay; the run's trec_eval order decides
                    columns, values = columns[chosen], values[chosen]
                results[query_ids[start + offset]] = {
                    doc_ids[c]: float(v) for c, v in zip(columns.tolist(), values.tolist())
                }
        return Run.adopt(results, name=name).truncated(depth)
