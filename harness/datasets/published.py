"""Published reference scores, shipped as ``harness/data/published-scores.csv``.

One row per (dataset, system, variant, split) with nDCG@10 and, where the source gives them,
Recall@100, MRR@10 and MAP@100, and the source of the figures. The rows come from four sources
(``harness/data/PUBLISHED-NOTES.md`` says how each was read and where they disagree):

* MTEB's results repository (``variant`` starts ``MTEB results``; one row per task file),
* pyserini's 2CR BEIR conditions (``pyserini 2CR <condition>``),
* the BEIR paper's Table 2 (``BEIR paper Table 2``),
* BEIR's reranking leaderboard (``BEIR reranking leaderboard: ... reranked by <cross-encoder>``).

A *column* is one system as one source reports it (``all-MiniLM-L6-v2 · MTEB``, ``bm25 · pyserini
flat``, ``bm25+ce · BEIR paper``): the rows of one column over several datasets.

Touché: BEIR's ``webis-touche2020`` is the v2 qrels (2021-09). MTEB's ``Touche2020Retrieval.v3`` rows
(re-judged) and the reranking leaderboard's Touché rows (written before v2) are other editions and
never match a ``webis-touche2020`` result.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Published columns by canonical metric name.
METRIC_COLUMNS = {"nDCG@10": "ndcg@10", "Recall@100": "recall@100", "MRR@10": "mrr@10", "MAP@100": "map@100"}
# The largest |ours - published| a reproduction check calls OK, per metric (`--tolerance` overrides).
TOLERANCE = {"nDCG@10": 0.003, "MAP@100": 0.003, "MRR@10": 0.003, "Recall@100": 0.005}
BASELINE = "bm25 · pyserini flat"  # the column `report --published` always adds
TOUCHE = "webis-touche2020"
# The source preferred for a system's own column, best first: what beir-harness reproduces.
_PREFERENCE = ("MTEB", "pyserini flat", "pyserini faiss", "pyserini", "BEIR paper", "BEIR README")


@dataclass(frozen=True)
class PublishedScore:
    """One published figure set: a system on a dataset and split, as one source reports it.

    Attributes:
        dataset: Registry name (a CQADupStack forum is ``cqadupstack/<forum>``).
        system: A hub id (``BAAI/bge-small-en-v1.5``) or a short system name (``bm25``, ``bm25+ce``).
        variant: How the source ran it, verbatim from the table.
        split: The split scored.
        values: Canonical metric name → value.
        source: Where the figures were read.
    """

    dataset: str
    system: str
    variant: str
    split: str
    values: dict[str, float] = field(hash=False)
    source: str

    @property
    def family(self) -> str:
        """The source and condition: ``MTEB``, ``pyserini flat``, ``BEIR paper``, ``BEIR README <model>``."""
        variant = self.variant
        if variant.startswith("MTEB"):
            return "MTEB"
        if variant.startswith("pyserini 2CR "):
            condition = variant.removeprefix("pyserini 2CR ").split(";")[0].split(" (")[0]
            short = _short(self.system)
            for prefix in (f"{short}.", f"{short}-"):
                condition = condition.removeprefix(prefix)
            return "pyserini" if condition == short else f"pyserini {condition}"
        if variant.startswith("BEIR paper"):
            return "BEIR paper"
        match = re.search(r"reranked by (\S+)", variant)
        return f"BEIR README {_short(match.group(1))}" if match else variant.split(";")[0]

    @property
    def column(self) -> str:
        """The column heading this row belongs to: ``<system> · <family>``."""
        return f"{_short(self.system)} · {self.family}"

    @property
    def edition(self) -> str:
        """For Touché, the qrels edition the figures were scored on (``v1``, ``v2``, ``v3``); else ""."""
        if self.dataset != TOUCHE:
            return ""
        if "Touche2020Retrieval.v3" in self.variant:
            return "v3"
        return "v1" if self.family.startswith("BEIR README") else "v2"

    @property
    def comparable(self) -> bool:
        """Whether a result on the registry's dataset can be compared with this row (same qrels)."""
        return self.edition in ("", "v2")

    @property
    def source_short(self) -> str:
        """The source without the per-file path: ``embeddings-benchmark/results@f4cc6c8b365a``."""
        repository, colon, rest = self.source.partition(":")
        if not colon or "/" not in repository:
            return self.source
        commit = rest.rsplit("@", 1)[-1][:12] if "@" in rest else ""
        path = "" if repository == "embeddings-benchmark/results" else rest.rsplit("@", 1)[0] + " "
        return f"{repository} {path}@{commit}".replace(" @", "@") if commit else self.source


def _short(system: str) -> str:
    return system.rstrip("/").rsplit("/", 1)[-1]


def _dataset(name: str) -> str:
    # The table names CQADupStack forums cqadupstack-<forum>; the registry writes cqadupstack/<forum>.
    return name.replace("cqadupstack-", "cqadupstack/", 1) if name.startswith("cqadupstack-") else name


def _csv(name: str) -> list[dict[str, str]]:
    text = importlib.resources.files("harness").joinpath(f"data/{name}").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


@functools.cache
def published_scores() -> tuple[PublishedScore, ...]:
    """Every row of the published-scores table."""
    rows = []
    for row in _csv("published-scores.csv"):
        values = {metric: float(row[column]) for metric, column in METRIC_COLUMNS.items() if row.get(column)}
        rows.append(PublishedScore(_dataset(row["dataset"]), row["system"], row["variant"], row["split"], values,
                                   row["source"]))
    return tuple(rows)


@functools.cache
def aliases() -> dict[str, str]:
    """Model names that a published system goes by (``naver/splade-cocondenser-ensembledistil`` → ``splade-pp-ed``)."""
    return {row["alias"]: row["system"] for row in _csv("published-aliases.csv")}


def system_of(model: str) -> str:
    """The published system a result's model is: itself, an alias, or the published system whose short
    name it has (``all-MiniLM-L6-v2`` or a local folder ``models/all-MiniLM-L6-v2`` →
    ``sentence-transformers/all-MiniLM-L6-v2``)."""
    if model.lower() == "bm25":
        return "bm25"
    systems = {row.system for row in published_scores()}
    if model in systems:
        return model
    if model in aliases():
        return aliases()[model]
    by_short = {}
    for system in sorted(systems):
        by_short.setdefault(_short(system).lower(), []).append(system)
    matches = by_short.get(_short(model).lower(), [])
    return matches[0] if len(matches) == 1 else model


def systems_of_result(model: str, rerank: dict | None = None) -> str:
    """The published system of a result: its model's, or ``bm25+ce`` for BM25 reranked by a cross-encoder."""
    if rerank and model.lower() == "bm25":
        return "bm25+ce"
    return system_of(model)


def preferred_column(system: str, rerank_model: str | None = None) -> str | None:
    """The column a result of `system` is measured against: the source beir-harness reproduces (MTEB
    for a model, pyserini's flat index for BM25; for BM25 + a cross-encoder the BEIR paper for
    ms-marco-MiniLM-L-6-v2, else the reranking leaderboard's row of that cross-encoder)."""
    columns = {row.column: row.family for row in published_scores() if row.system == system}
    if not columns:
        return None
    if system == "bm25+ce" and rerank_model is not None:
        model = _short(rerank_model)
        if model != "ms-marco-MiniLM-L-6-v2":
            wanted = f"bm25+ce · BEIR README {model}"
            return wanted if wanted in columns else None
    for family in _PREFERENCE:
        for column, its_family in sorted(columns.items()):
            if its_family == family or (family in ("pyserini", "BEIR README") and its_family.startswith(family)):
                return column
    return sorted(columns)[0]


def columns(names: Iterable[str]) -> list[str]:
    """Columns for names given by a user: a column heading, or a system (its preferred column).

    Raises:
        KeyError: A name that is neither (the message lists close systems).
    """
    every = {row.column for row in published_scores()}
    chosen = []
    for name in names:
        if name in every:
            chosen.append(name)
            continue
        column = preferred_column(system_of(name))
        if column is None:
            raise KeyError(name)
        chosen.append(column)
    return list(dict.fromkeys(chosen))


def column_rows(column: str, split_of, datasets: Iterable[str] | None = None) -> dict[str, PublishedScore]:
    """The comparable rows of one column by dataset, on each dataset's evaluation split (`split_of(dataset)`)."""
    wanted = None if datasets is None else set(datasets)
    return {row.dataset: row for row in published_scores()
            if row.column == column and row.comparable and row.split == split_of(row.dataset)
            and (wanted is None or row.dataset in wanted)}


def find(dataset: str, split: str, system: str | None = None) -> list[PublishedScore]:
    """Comparable published rows for a dataset and split (and a system, if given)."""
    return [row for row in published_scores() if row.dataset == dataset and row.split == split and row.comparable
            and (system is None or row.system == system_of(system))]


def reproduced(dataset: str, split: str, model: str, rerank_model: str | None = None) -> PublishedScore | None:
    """The published row a result of `model` (reranked by `rerank_model`) should reproduce, or None."""
    system = systems_of_result(model, {"model": rerank_model} if rerank_model else None)
    column = preferred_column(system, rerank_model)
    rows = [row for row in find(dataset, split) if row.column == column]
    return rows[0] if len(rows) == 1 else None


def counts_by_dataset() -> dict[str, int]:
    """How many published rows each dataset has (CQADupStack forums count toward ``cqadupstack``)."""
    counts: dict[str, int] = {}
    for row in published_scores():
        name = row.dataset.split("/")[0]
        counts[name] = counts.get(name, 0) + 1
    return counts
