"""Vector index: exact inner-product search with FAISS on the CPU.

With normalized vectors, inner product is cosine similarity. `FlatIndex` keeps the doc_ids
beside the FAISS index (FAISS knows only row numbers) and turns search results into a
`Run` ranked by the trec_eval rule. faiss is imported only when an index is built.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.errors import MissingDependencyError
from harness.records import Run

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise MissingDependencyError("faiss is not installed (pip install faiss-cpu)") from exc
    return faiss


class FlatIndex:
    """An exact inner-product index (``faiss.IndexFlatIP``) with its doc_ids.

    Vectors are added chunk by chunk; FAISS copies each chunk, so the caller's arrays can
    be dropped after `add`.
    """

    index_type = "flat"

    def __init__(self, dimension: int):
        self._index = _faiss().IndexFlatIP(dimension)
        self._doc_ids: list[str] = []

    @property
    def dimension(self) -> int:
        return self._index.d

    def __len__(self) -> int:
        return self._index.ntotal

    def add(self, doc_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add one chunk of vectors (float32, shape (len(doc_ids), dimension))."""
        import numpy as np

        if vectors.shape != (len(doc_ids), self.dimension):
            raise ValueError(f"vectors of shape {vectors.shape} for {len(doc_ids)} ids of dimension {self.dimension}")
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        self._doc_ids.extend(doc_ids)

    def search(self, query_ids: Sequence[str], vectors: np.ndarray, depth: int, name: str = "run") -> Run:
        """Retrieve the `depth` highest-scoring documents for each query.

        Args:
            query_ids: One id per row of `vectors`.
            vectors: Query vectors, float32, shape (len(query_ids), dimension).
            depth: Documents retrieved per query (capped at the corpus size).
            name: The run's tag.

        Returns:
            A Run ranked by score, ties by doc_id descending (trec_eval's order).
        """
        import numpy as np

        depth = min(depth, len(self))
        if depth <= 0 or len(query_ids) == 0:
            return Run.from_scores({query_id: {} for query_id in query_ids}, name=name)
        scores, rows = self._index.search(np.ascontiguousarray(vectors, dtype=np.float32), depth)
        doc_ids = self._doc_ids
        results = {}
        for query_id, query_scores, query_rows in zip(query_ids, scores.tolist(), rows.tolist()):
            # FAISS pads with row -1 when it has fewer than `depth` results.
            results[query_id] = [(doc_ids[row], score) for row, score in zip(query_rows, query_scores) if row >= 0]
        return Run.from_scores(results, name=name)
