"""Retrieval metrics that agree exactly with trec_eval (pytrec_eval), as BEIR and MTEB use it.

Canonical names are ``<family>@<k>``: ``nDCG@10``, ``MAP@10``, ``Recall@100``, ``P@5``,
``MRR@10``. The families are a data table (``harness/data/metrics.csv``) mapping each to the
trec_eval measure that computes it (pytrec_eval); MRR@k is trec_eval's ``recip_rank`` (which has
no cutoff) set to 0 when the first relevant document ranks below k.

Evaluation rules (pinned by tests):

* **Every judged query counts.** The mean is taken over every query in the qrels of the
  split (trec_eval ``-c``). A judged query that is missing from the run, or has an empty
  ranked list, scores 0 on every metric. Queries in the run but not in the qrels are ignored.
* **Relevant means grade ≥ 1.** Grade 0 is judged non-relevant; negative grades are
  non-relevant too.
* **Ranking.** Documents are ordered by score descending, ties by doc_id descending
  (trec_eval's order, see `harness.records`); the rank column of a run file is ignored.
* **Cutoff.** Only the first k documents of that order are looked at.

Formulas, for one query with judged grades ``rel(d)``, ranked list ``d_1, d_2, ...``, and
``R = {d : rel(d) ≥ 1}``:

* ``nDCG@k = DCG@k / IDCG@k`` with ``DCG@k = Σ_{i≤k} rel(d_i) / log2(i + 1)`` (linear gain,
  unjudged documents gain 0) and ``IDCG@k`` the DCG@k of all judged documents sorted by
  grade; 0 when ``IDCG@k = 0`` (trec_eval ``ndcg_cut``; Järvelin & Kekäläinen 2002).
* ``MAP@k = (1/|R|) Σ_{i≤k, d_i∈R} P@i`` (trec_eval ``map_cut``; the denominator is all
  relevant documents, not only those above k).
* ``Recall@k = |{d_i : i≤k} ∩ R| / |R|`` (trec_eval ``recall``).
* ``P@k = |{d_i : i≤k} ∩ R| / k`` (trec_eval ``P``; k even when fewer are retrieved).
* ``MRR@k = 1 / min{i ≤ k : d_i ∈ R}``, 0 when no relevant document is in the top k
  (trec_eval ``recip_rank`` on the run cut at k).

Each metric is 0 for a query with no relevant document.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.errors import UnknownMetricError
from harness.records import Qrels, Run


@dataclass(frozen=True)
class MetricFamily:
    """One row of the metric table: a metric name and how it is computed."""

    name: str
    trec_eval: str | None
    description: str


@dataclass(frozen=True, order=True)
class MetricSpec:
    """A metric at a cutoff, e.g. ``nDCG@10``; ``str()`` gives the canonical name."""

    name: str
    k: int

    def __str__(self) -> str:
        return f"{self.name}@{self.k}"


@functools.cache
def metric_families() -> dict[str, MetricFamily]:
    """The metric table shipped in ``harness/data/metrics.csv``, in display order."""
    text = importlib.resources.files("harness").joinpath("data/metrics.csv").read_text(encoding="utf-8")
    families: dict[str, MetricFamily] = {}
    for row in csv.DictReader(text.splitlines()):
        if row["name"] in families:
            raise ValueError(f"metrics.csv: duplicate metric {row['name']!r}")
        families[row["name"]] = MetricFamily(row["name"], row["trec_eval"] or None, row["description"])
    return families


# trec_eval measures without a cutoff parameter: computed once, then cut at each k here.
# recip_rank = 1/r for the first relevant rank r in trec_eval's order, so MRR@k = recip_rank if r ≤ k.
_UNCUT = {"recip_rank"}


def _cut_reciprocal_rank(value: float, k: int) -> float:
    return value if value > 0 and round(1 / value) <= k else 0.0


def parse_metric(text: str) -> MetricSpec:
    """Parse a metric name such as ``nDCG@10`` (family names are case-insensitive).

    Raises:
        UnknownMetricError: Unknown family or a cutoff that is not a positive integer.
    """
    families = metric_families()
    name, sep, k_text = text.strip().partition("@")
    by_lower = {family.lower(): family for family in families}
    canonical = by_lower.get(name.lower())
    if canonical is None or not sep:
        raise UnknownMetricError(
            f"unknown metric {text!r}; use one of {', '.join(f'{f}@k' for f in families)} (e.g. nDCG@10)"
        )
    k = parse_k_values(k_text)
    if len(k) != 1:
        raise UnknownMetricError(f"metric {text!r} needs one cutoff, e.g. {canonical}@10")
    return MetricSpec(canonical, k[0])


def parse_k_values(text: str) -> list[int]:
    """Parse a comma-separated list of cutoffs (``"1,3,10"``) into sorted unique ints.

    Raises:
        UnknownMetricError: Empty list or an entry that is not a positive integer.
    """
    values = set()
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or int(part) <= 0:  # "²".isdigit() is True
            raise UnknownMetricError(f"cutoff {part!r} in {text!r} is not a positive integer (e.g. 1,3,10)")
        values.add(int(part))
    return sorted(values)


def standard_metrics(k_values: Iterable[int]) -> list[MetricSpec]:
    """Every metric family at every cutoff, in table order then by k."""
    ks = sorted(set(k_values))
    return [MetricSpec(name, k) for name in metric_families() for k in ks]


@dataclass(frozen=True)
class Evaluation:
    """Scores of one run against one set of qrels.

    Attributes:
        means: canonical metric name → mean over every judged query.
        per_query: query_id → canonical metric name → value, for every judged query.
        n_queries: Number of judged queries (the denominator of every mean).
        n_missing: Judged queries absent from the run (scored 0).
        n_unjudged: Run queries absent from the qrels (ignored).
    """

    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    n_missing: int
    n_unjudged: int


def evaluate(qrels: Qrels, run: Run, metrics: Sequence[MetricSpec]) -> Evaluation:
    """Score a run with the rules in this module's docstring.

    Args:
        qrels: The judgments of the split; their queries are the denominator.
        run: The ranked results. It is not modified.
        metrics: What to compute, e.g. ``standard_metrics([1, 3, 10])``.

    Returns:
        An Evaluation with per-query values and means over every judged query.
    """
    import pytrec_eval

    families = metric_families()
    for spec in metrics:
        if spec.name not in families:
            raise UnknownMetricError(f"unknown metric {spec}")
    names = [str(spec) for spec in metrics]
    judged_scores = run.trec_eval_input(qrels)
    evaluated: dict[str, dict[str, float]] = {}

    by_measure: dict[str, list[MetricSpec]] = {}
    for spec in metrics:
        by_measure.setdefault(families[spec.name].trec_eval, []).append(spec)
    if judged_scores:
        measure_strings = {m if m in _UNCUT else f"{m}." + ",".join(str(s.k) for s in specs)
                           for m, specs in by_measure.items()}
        evaluator = pytrec_eval.RelevanceEvaluator(qrels.to_dict(), measure_strings)
        # One C-level lookup per query: trec_eval's key for each name, in name order.
        trec_keys = [families[spec.name].trec_eval if families[spec.name].trec_eval in _UNCUT
                     else f"{families[spec.name].trec_eval}_{spec.k}" for spec in metrics]
        take = operator.itemgetter(*trec_keys) if len(trec_keys) > 1 else (lambda values: (values[trec_keys[0]],))
        uncut = [(str(spec), spec.k) for spec in metrics if families[spec.name].trec_eval in _UNCUT]
        for query_id, values in evaluator.evaluate(judged_scores).items():
            row = evaluated[query_id] = dict(zip(names, take(values)))
            for name, k in uncut:
                row[name] = _cut_reciprocal_rank(row[name], k)

    # Every judged query counts: one without results scores 0 on every metric.
    zeros = dict.fromkeys(names, 0.0)
    per_query = {query_id: evaluated.get(query_id) or dict(zeros) for query_id in qrels}
    n = len(qrels)
    rows = list(per_query.values())
    means = {name: (math.fsum(map(operator.itemgetter(name), rows)) / n if n else 0.0) for name in names}
    return Evaluation(
        means=means,
        per_query=per_query,
        n_queries=n,
        n_missing=sum(1 for query_id in qrels if not judged_scores.get(query_id)),
        n_unjudged=sum(1 for query_id in run if query_id not in qrels),
    )
