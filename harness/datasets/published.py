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
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.datasets import registry
from harness.errors import HarnessError

logger = logging.getLogger(__name__)

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
        if variant.startswith("folder "):
            return variant.removeprefix("folder ").split(";")[0]
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
        """The source without the per-file path: ``embeddings-benchmark/results@f4cc6c8b365a``; for a row
        read from an MTEB results folder, that folder."""
        root = re.search(r"root=([^;]+)", self.variant) if self.variant.startswith("folder ") else None
        if root:
            return f"MTEB results folder {root.group(1)}"
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
        rows.append(
            PublishedScore(_dataset(row["dataset"]), row["system"], row["variant"], row["split"], values, row["source"])
        )
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


def column_rows(
    column: str, split_of, datasets: Iterable[str] | None = None, rows: Iterable[PublishedScore] | None = None
) -> dict[str, PublishedScore]:
    """The comparable rows of one column by dataset, on each dataset's evaluation split (`split_of(dataset)`),
    from `rows` (default: the shipped table)."""
    wanted = None if datasets is None else set(datasets)
    return {
        row.dataset: row
        for row in (published_scores() if rows is None else rows)
        if row.column == column
        and row.comparable
        and row.split == split_of(row.dataset)
        and (wanted is None or row.dataset in wanted)
    }


def find(dataset: str, split: str, system: str | None = None) -> list[PublishedScore]:
    """Comparable published rows for a dataset and split (and a system, if given)."""
    return [
        row
        for row in published_scores()
        if row.dataset == dataset
        and row.split == split
        and row.comparable
        and (system is None or row.system == system_of(system))
    ]


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


# MTEB's score keys read from a results folder → our metric names.
_MTEB_KEYS = {"ndcg_at_10": "nDCG@10", "recall_at_100": "Recall@100", "mrr_at_10": "MRR@10", "map_at_100": "MAP@100"}


def from_mteb_folder(folder: str | Path) -> list[PublishedScore]:
    """Published rows from any MTEB results folder (a checkout of MTEB's results repository, its
    ``results/`` folder, or another team's `beir-harness export --format mteb`).

    Each ``<model>/<revision>/<Task>.json`` of a BEIR task becomes a row of column
    ``<model> · <folder name>``, scored on the registry's evaluation split (``hf_subset`` default);
    CQADupStack's 12 forum tasks also give their mean. The model name comes from ``model_meta.json``,
    else from the folder (``org__name`` → ``org/name``).

    Raises:
        HarnessError: The folder does not exist or holds no BEIR task file.
    """
    root = Path(folder)
    if not root.is_dir():
        raise HarnessError(f"{root}: no such MTEB results folder")
    family = root.resolve().name if root.resolve().name != "results" else root.resolve().parent.name
    rows: list[PublishedScore] = []
    for path in sorted(root.rglob("*.json")):
        dataset = registry.from_mteb_task(path.stem)
        if dataset is None or path.name == "model_meta.json":
            continue
        row = _mteb_row(path, dataset, f"{family}; root={root}")
        if row is not None:
            rows.append(row)
    rows += _forum_means(rows, f"{family}; root={root}")
    if not rows:
        raise HarnessError(
            f"{root}: no MTEB task file of a BEIR dataset (<model>/<revision>/<Task>.json, e.g. SciFact.json)"
        )
    return rows


def _mteb_row(path: Path, dataset: str, family: str) -> PublishedScore | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("%s: unreadable, skipped (%s)", path, exc)
        return None
    split = (registry.lookup(dataset) or registry.get(dataset.split("/")[0])).eval_split
    entries = (data.get("scores") or {}).get(registry.mteb_split_name(dataset, split)) or []
    if isinstance(entries, dict):  # MTEB before 1.11: one dict per split
        entries = [entries]
    entry = next((e for e in entries if e.get("hf_subset", "default") == "default"), None)
    if entry is None:
        return None
    values = {ours: float(entry[key]) for key, ours in _MTEB_KEYS.items() if entry.get(key) is not None}
    if "nDCG@10" not in values:
        return None
    model = _model_name(path.parent)
    return PublishedScore(
        dataset,
        model,
        f"folder {family}; task={path.stem}; revision={path.parent.name}; mteb={data.get('mteb_version')}",
        split,
        values,
        str(path),
    )


def _model_name(revision_folder: Path) -> str:
    try:
        return json.loads((revision_folder / "model_meta.json").read_text(encoding="utf-8"))["name"]
    except (OSError, ValueError, KeyError):
        return revision_folder.parent.name.replace("__", "/")


def _forum_means(rows: list[PublishedScore], family: str) -> list[PublishedScore]:
    forums = registry.get("cqadupstack").subsets
    means = []
    for system in sorted({row.system for row in rows}):
        by_forum = {
            row.dataset.split("/")[1]: row
            for row in rows
            if row.system == system and row.dataset.startswith("cqadupstack/")
        }
        if sorted(by_forum) != sorted(forums):
            continue
        values = {}
        for metric in set.intersection(*(set(row.values) for row in by_forum.values())):
            values[metric] = registry.subset_mean("cqadupstack", {f: r.values[metric] for f, r in by_forum.items()})[0]
        means.append(
            PublishedScore(
                "cqadupstack",
                system,
                f"folder {family}; mean of 12 CQADupstack forums",
                by_forum[forums[0]].split,
                values,
                str(Path(by_forum[forums[0]].source).parent),
            )
        )
    return means
