"""Published reference scores, shipped as ``harness/data/published-scores.csv``.

One row per (dataset, system, variant, split) with nDCG@10 and, where known, Recall@100 and
MRR@10, and the source of the figure. A result matches a row on dataset, split and system, where
the system is the model's full name (the short ``all-MiniLM-L6-v2`` works) or ``bm25``.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
from dataclasses import dataclass

# Published columns by canonical metric name.
METRIC_COLUMNS = {"nDCG@10": "ndcg@10", "Recall@100": "recall@100", "MRR@10": "mrr@10"}

# For a system with several published variants, the one beir-harness reproduces.
REPRODUCED_VARIANT = {"bm25": "pyserini BM25 flat"}


@dataclass(frozen=True)
class PublishedScore:
    """One published figure set."""

    dataset: str
    system: str
    variant: str
    split: str
    values: dict[str, float]
    source: str

    @property
    def label(self) -> str:
        """A column heading: ``all-MiniLM-L6-v2 · MTEB``, ``bm25 · pyserini BM25 flat``."""
        return f"{self.system.rsplit('/', 1)[-1]} · {self.variant}"


@functools.cache
def published_scores() -> tuple[PublishedScore, ...]:
    """Every row of the published-scores table."""
    text = importlib.resources.files("harness").joinpath("data/published-scores.csv").read_text(encoding="utf-8")
    rows = []
    for row in csv.DictReader(text.splitlines()):
        values = {metric: float(row[column]) for metric, column in METRIC_COLUMNS.items() if row[column]}
        rows.append(PublishedScore(row["dataset"], row["system"], row["variant"], row["split"], values, row["source"]))
    return tuple(rows)


def system_of(model: str) -> str:
    """The published system name of a result's model: itself, or the full hub id of a published system
    whose short name it is (``all-MiniLM-L6-v2`` → ``sentence-transformers/all-MiniLM-L6-v2``)."""
    if model.lower() == "bm25":
        return "bm25"
    systems = {row.system for row in published_scores()}
    if model in systems:
        return model
    return {system.rsplit("/", 1)[-1]: system for system in sorted(systems)}.get(model, model)


def find(dataset: str, split: str, system: str | None = None) -> list[PublishedScore]:
    """Published rows for a dataset and split (and a system, if given)."""
    return [row for row in published_scores() if row.dataset == dataset and row.split == split
            and (system is None or row.system == system_of(system))]


def reproduced(dataset: str, split: str, model: str) -> PublishedScore | None:
    """The published row a result of `model` should reproduce, or None."""
    rows = find(dataset, split, model)
    variant = REPRODUCED_VARIANT.get(system_of(model))
    if variant is not None:
        rows = [row for row in rows if row.variant == variant]
    return rows[0] if len(rows) == 1 else None


def counts_by_dataset() -> dict[str, int]:
    """How many published rows each dataset has."""
    counts: dict[str, int] = {}
    for row in published_scores():
        counts[row.dataset] = counts.get(row.dataset, 0) + 1
    return counts
