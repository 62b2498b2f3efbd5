"""Vector indexes and exact search: the FAISS indexes (flat, hnsw, ivf, ivfpq, pq, sq8) with compact doc ids
(`faiss_index`); the exact top-k that every flat search shares, in memory, streamed or sharded (`exact`: the scan
kernel, float64 rescoring, the tie rule at the cut); long documents as passages (`passages`) and late interaction's
exact MaxSim (`multivector`)."""

from harness.retrieval.index.exact import (
    MERGE_BYTES,
    RESCORE_BYTES,
    RESCORE_MARGIN,
    SCAN_QUERIES,
    SCAN_TILE,
    ScanWork,
    TopScan,
    exact_top,
    merge_top,
    rescore_groups,
    scan_top,
)
from harness.retrieval.index.faiss_index import (
    INDEX_KINDS,
    TRAINED,
    DocIds,
    IndexConfigError,
    IndexSpec,
    RowIndex,
    VectorIndex,
    default_nlist,
    exact_knn,
    recall_of_exact,
    serialized_size,
)

__all__ = [
    "INDEX_KINDS",
    "MERGE_BYTES",
    "RESCORE_BYTES",
    "RESCORE_MARGIN",
    "SCAN_QUERIES",
    "SCAN_TILE",
    "TRAINED",
    "DocIds",
    "IndexConfigError",
    "IndexSpec",
    "RowIndex",
    "ScanWork",
    "TopScan",
    "VectorIndex",
    "default_nlist",
    "exact_knn",
    "exact_top",
    "merge_top",
    "recall_of_exact",
    "rescore_groups",
    "scan_top",
    "serialized_size",
]
