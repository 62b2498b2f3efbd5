"""Whether an eval set is done: how much of each system's top k is judged.

Judged@k is the metric of `harness.evaluation.metrics` (ir_measures' ``Judged``), averaged over the split's
judged queries; the unjudged count is the number of (query, document) pairs in the run's top k of those
queries that have no grade: the pairs a pool at depth k would still ask the annotators to judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.evaluation.metrics import evaluate, parse_metric
from harness.io.formats import locate_beir_folder, read_qrels, read_run


@dataclass
class Coverage:
    """One run's coverage by a split's judgments."""

    run: str
    k: int
    judged_at_k: float  # mean Judged@k over the split's judged queries
    unjudged: int  # unjudged pairs in the top k of those queries
    n_queries: int

    def to_json(self) -> dict[str, Any]:
        """The coverage as a JSON object."""
        return {
            "run": self.run,
            "k": self.k,
            f"Judged@{self.k}": self.judged_at_k,
            "unjudged_in_top_k": self.unjudged,
            "n_queries": self.n_queries,
        }

    def format_text(self) -> str:
        """One line: the run, its Judged@k and its unjudged pairs."""
        return (
            f"{self.run}: Judged@{self.k} {self.judged_at_k:.3f}, {self.unjudged} unjudged documents in the "
            f"top {self.k} of {self.n_queries} judged queries"
        )


def run_coverage(root: str | Path, split: str, run_path: str | Path, k: int = 10) -> Coverage:
    """Judged@k of the run in `run_path` on `split` of the BEIR folder `root`, and its unjudged top-k pairs.

    Raises:
        DatasetError: No such split.
        FormatError: An unreadable qrels or run file.
    """
    qrels = read_qrels(locate_beir_folder(root, split).qrels)
    run = read_run(run_path)
    spec = parse_metric(f"Judged@{k}")
    judged = evaluate(qrels, run, [spec]).means[str(spec)]
    unjudged = sum(
        1
        for query_id in qrels
        if query_id in run
        for scored in run[query_id][:k]
        if scored.doc_id not in qrels[query_id]
    )
    return Coverage(str(run_path), k, judged, unjudged, len(qrels))
