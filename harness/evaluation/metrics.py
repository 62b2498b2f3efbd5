"""Retrieval metrics that agree exactly with trec_eval (pytrec_eval), as BEIR and MTEB use it.

Canonical names are ``<family>@<k>``: ``nDCG@10``, ``MAP@10``, ``Recall@100``, ``P@5``,
``MRR@10``, ``Success@10``, ``Judged@10``, and ``R-Prec`` (no cutoff). ``nDCG``, ``MAP`` and ``MRR``
without a cutoff read the whole run as retrieved, as trec_eval's ``ndcg``, ``map`` and ``recip_rank`` do
(``AP``, ``RR``, ``recip_rank``, ``map``, ``ndcg`` name them too); the table's ``uncut`` column names
that trec_eval measure. The families are a data table
(``harness/data/metrics.csv``) mapping each to the trec_eval measure that computes it (pytrec_eval),
with the names other tools use for it: trec_eval's (``ndcg_cut_10``, ``ndcg_cut.10``, ``recall_100``,
``map_cut_100``, ``P_10``, ``success_10``, ``Rprec``), ir_measures' (``R@100``, ``RR@10``, ``AP@100``,
``Success@10``, ``Judged@10``) and MTEB's (``ndcg_at_10``, ``recall_at_100``, ``mrr_at_10``,
``hit_rate_at_10``). MRR@k is trec_eval's ``recip_rank`` (which has no cutoff) set to 0 when the first
relevant document ranks below k; Judged@k is computed here.

Evaluation rules (pinned by tests):

* **Every judged query counts.** The mean is taken over every query in the qrels of the
  split (trec_eval ``-c``). A judged query that is missing from the run, or has an empty
  ranked list, scores 0 on every metric. Queries in the run but not in the qrels are ignored.
* **Relevant means grade ≥ 1.** Grade 0 is judged non-relevant; negative grades are
  non-relevant too.
* **Ranking.** Documents are ordered by score descending, ties by doc_id descending
  (trec_eval's order, see `harness.records`); the rank column of a run file is ignored.
* **Cutoff.** Only the first k documents of that order are looked at; a metric without a cutoff
  (``nDCG``, ``MAP``, ``MRR``, ``R-Prec``) looks at every document the run has for the query.

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
* ``Success@k = 1 if {d_i : i≤k} ∩ R ≠ ∅ else 0`` (trec_eval ``success``).
* ``R-Prec = |{d_i : i≤|R|} ∩ R| / |R|`` (trec_eval ``Rprec``).
* ``Judged@k = |{d_i : i≤k} ∩ J| / min(k, n)`` with ``J`` every judged document (any grade) and ``n``
  the number retrieved; 0 when nothing is retrieved (ir_measures ``Judged``). Unjudged documents
  count as non-relevant in every other metric, so a low Judged@10 (TREC-COVID, Touché) says the
  other numbers are lower bounds.

Each metric but Judged is 0 for a query with no relevant document.
"""

from __future__ import annotations

import bisect
import csv
import difflib
import functools
import importlib.resources
import math
import operator
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from harness.errors import UnknownMetricError
from harness.records import Qrels, Run


@dataclass(frozen=True)
class MetricFamily:
    """One row of the metric table: a metric name and how it is computed."""

    name: str
    trec_eval: str | None
    description: str
    cutoff: bool = True
    aliases: tuple[str, ...] = ()
    uncut: str | None = None  # the trec_eval measure over the whole run, when the family has one


@dataclass(frozen=True, order=True)
class MetricSpec:
    """A metric at a cutoff, e.g. ``nDCG@10``; ``str()`` gives the canonical name. k is 0 for a metric
    over the whole run: ``R-Prec``, and ``nDCG``, ``MAP``, ``MRR`` written without a cutoff."""

    name: str
    k: int

    def __str__(self) -> str:
        return f"{self.name}@{self.k}" if self.k else self.name


@functools.cache
def metric_families() -> dict[str, MetricFamily]:
    """The metric table shipped in ``harness/data/metrics.csv``, in display order."""
    text = importlib.resources.files("harness").joinpath("data/metrics.csv").read_text(encoding="utf-8")
    families: dict[str, MetricFamily] = {}
    for row in csv.DictReader(text.splitlines()):
        if row["name"] in families:
            raise ValueError(f"metrics.csv: duplicate metric {row['name']!r}")
        families[row["name"]] = MetricFamily(row["name"], row["trec_eval"] or None, row["description"],
                                             row["cutoff"] == "yes", tuple(row["aliases"].split(";")),
                                             row["uncut"] or None)
    return families


@functools.cache
def _aliases() -> dict[str, str]:
    """Every lowercase name of a family → the family."""
    names: dict[str, str] = {}
    for family in metric_families().values():
        for alias in (family.name.lower(), *family.aliases):
            if names.setdefault(alias, family.name) != family.name:
                raise ValueError(f"metrics.csv: alias {alias!r} names two metrics")
    return names


_WITH_CUTOFF = re.compile(r"^(?P<name>[a-z][a-z_\-]*?)(?:@|_at_|\.|_)(?P<k>[^@._]*)$")


# trec_eval measures without a cutoff parameter: computed once, then cut at each k here.
# recip_rank = 1/r for the first relevant rank r in trec_eval's order, so MRR@k = recip_rank if r ≤ k.
_UNCUT = {"recip_rank"}


_Grades = dict[str, dict[str, int]]  # query_id → doc_id → grade, plain dicts
_Values = dict[str, dict[str, float]]  # query_id → doc_id or metric name → value


def _first_relevant_rank(reciprocal_rank: float) -> float:
    """The rank r of the first relevant document from trec_eval's 1/r (infinite when none is retrieved)."""
    return round(1 / reciprocal_rank) if reciprocal_rank > 0 else math.inf


def parse_metric(text: str) -> MetricSpec:
    """Parse a metric name in our spelling or trec_eval's, ir_measures' or MTEB's (see the module
    docstring): ``nDCG@10``, ``ndcg_cut_10``, ``ndcg_cut.10``, ``ndcg_at_10``, ``R@100``, ``Rprec``.

    Raises:
        UnknownMetricError: An unknown name (with the closest known ones), a missing or malformed cutoff.
    """
    raw = text.strip()
    lowered = raw.lower()
    aliases = _aliases()
    if lowered in aliases:
        family = metric_families()[aliases[lowered]]
        # ndcg_cut and map_cut are trec_eval's cut measures: bare, they mean its default cutoffs, not the run.
        names_cut_measure = lowered == (family.trec_eval or "").lower() and family.trec_eval != family.uncut
        if not family.cutoff or (family.uncut and not names_cut_measure):
            return MetricSpec(family.name, 0)
        whole = f" (or {family.name}: the whole run)" if family.uncut else ""
        raise UnknownMetricError(f"metric {raw!r} needs a cutoff, e.g. {family.name}@10{whole}")
    match = _WITH_CUTOFF.match(lowered)
    name = aliases.get(match["name"]) if match else None
    if name is None:
        raise UnknownMetricError(f"unknown metric {raw!r}; {_suggest(lowered)}")
    k_text = raw[match.start("k"):]
    if not (k_text.isascii() and k_text.isdigit()) or int(k_text) <= 0:
        raise UnknownMetricError(f"metric {raw!r}: cutoff {k_text!r} is not a positive integer (e.g. {name}@10)")
    if not metric_families()[name].cutoff:
        raise UnknownMetricError(f"metric {raw!r}: {name} has no cutoff; write {name}")
    return MetricSpec(name, int(k_text))


def _suggest(lowered: str) -> str:
    """``did you mean nDCG@10?`` from the close family names, else the list of canonical names."""
    families = metric_families()
    head, _, k = lowered.partition("@")
    close = difflib.get_close_matches(head, list(_aliases()), n=1, cutoff=0.6)
    if close:
        family = families[_aliases()[close[0]]]
        return f"did you mean {family.name}{'@' + (k or '10') if family.cutoff else ''}?"
    return "use one of " + ", ".join(f"{f.name}@k" if f.cutoff else f.name for f in families.values()) + \
        " (e.g. nDCG@10)"


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
    """Every metric family at every cutoff (a family without one, once), in table order then by k."""
    ks = sorted(set(k_values))
    return [MetricSpec(family.name, k) for family in metric_families().values()
            for k in (ks if family.cutoff else [0])]


@dataclass(frozen=True)
class Evaluation:
    """Scores of one run against one set of qrels.

    Attributes:
        means: canonical metric name → mean over every judged query.
        per_query: query_id → canonical metric name → value, for every judged query.
        n_queries: Number of judged queries (the denominator of every mean).
        n_missing: Judged queries absent from the run (scored 0).
        n_unjudged: Run queries absent from the qrels (ignored).
        depth: When nDCG, MAP or MRR was asked for without a cutoff: the most documents the run has for
            one judged query, the depth those whole-run values read; None otherwise.
    """

    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    n_missing: int
    n_unjudged: int
    depth: int | None = None


def evaluate(qrels: Qrels, run: Run, metrics: Sequence[MetricSpec]) -> Evaluation:
    """Score a run with the rules in this module's docstring.

    Args:
        qrels: The judgments of the split; their queries are the denominator.
        run: The ranked results. It is not modified.
        metrics: What to compute, e.g. ``standard_metrics([1, 3, 10])``.

    Returns:
        An Evaluation with per-query values and means over every judged query.
    """
    families = metric_families()
    for spec in metrics:
        family = families.get(spec.name)
        if family is None or (spec.k and not family.cutoff) or (not spec.k and family.cutoff and not family.uncut):
            raise UnknownMetricError(f"unknown metric {spec}")
    names = [str(spec) for spec in metrics]
    judged_scores = run.trec_eval_input(qrels)
    # Every judged query counts: one without results scores 0 on every metric. Each row starts as zeros
    # in name order and is filled in place (no second dict per query).
    zeros = dict.fromkeys(names, 0.0)
    per_query = {query_id: zeros.copy() for query_id in qrels}
    judgments = qrels.to_dict()  # plain dicts: what pytrec_eval takes, and C-level lookups below
    trec = [spec for spec in metrics if families[spec.name].trec_eval]
    judged = [spec for spec in metrics if spec.name == "Judged"]
    if judged_scores and trec:
        _trec_eval(judgments, judged_scores, trec, per_query)
    if judged:
        _judged(judgments, judged_scores, judged, per_query)

    whole_run = any(not spec.k and families[spec.name].cutoff for spec in metrics)
    n = len(qrels)
    rows = list(per_query.values())
    means = {name: (math.fsum(map(operator.itemgetter(name), rows)) / n if n else 0.0) for name in names}
    return Evaluation(
        means=means,
        per_query=per_query,
        n_queries=n,
        n_missing=sum(1 for query_id in qrels if not judged_scores.get(query_id)),
        n_unjudged=sum(1 for query_id in run if query_id not in per_query),  # a dict: C-level lookups
        depth=max(map(len, judged_scores.values()), default=0) if whole_run else None,
    )


def _trec_eval(qrels: _Grades, scores: _Values, metrics: Sequence[MetricSpec], evaluated: _Values) -> None:
    """The metrics trec_eval computes, into `evaluated` (query_id → name → value)."""
    import pytrec_eval

    measures = [_measure(spec) for spec in metrics]
    by_measure: dict[str, list[MetricSpec]] = {}
    for spec, measure in zip(metrics, measures):
        by_measure.setdefault(measure, []).append(spec)
    uncut = {measure for measure, specs in by_measure.items() if measure in _UNCUT or not specs[0].k}
    measure_strings = {m if m in uncut else f"{m}." + ",".join(str(s.k) for s in specs)
                       for m, specs in by_measure.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measure_strings)
    # One C-level lookup per query: trec_eval's key for each name, in name order.
    names = [str(spec) for spec in metrics]
    keys = [measure if measure in uncut else f"{measure}_{spec.k}" for spec, measure in zip(metrics, measures)]
    take = operator.itemgetter(*keys) if len(keys) > 1 else (lambda values: (values[keys[0]],))
    # MRR@k from recip_rank; MRR without a cutoff (k = 0) is recip_rank itself.
    cut = [(str(spec), spec.k) for spec, measure in zip(metrics, measures) if measure in _UNCUT and spec.k]
    for query_id, values in evaluator.evaluate(scores).items():
        row = evaluated[query_id]
        row.update(zip(names, take(values)))
        if cut:
            rank = _first_relevant_rank(values["recip_rank"])
            for name, k in cut:
                if rank > k:
                    row[name] = 0.0


def _measure(spec: MetricSpec) -> str:
    """The trec_eval measure computing `spec`: the family's cut one, or its whole-run one when k is 0."""
    family = metric_families()[spec.name]
    return family.uncut if not spec.k and family.uncut else family.trec_eval


def _judged(qrels: _Grades, scores: _Values, metrics: Sequence[MetricSpec], evaluated: _Values) -> None:
    """Judged@k at every k, into `evaluated`: the judged share of the top k (of those retrieved), in
    trec_eval's order on the scores as given (float64, as ir_measures compares them).

    Nothing is ranked (ranking 1M documents to look at a few took 4x trec_eval's time): only the ranks of
    the query's retrieved judged documents are computed, and only when some k is below the depth.
    trec_eval's own P@k cannot stand in even where every judgment is relevant: pytrec_eval compares
    scores as float32, so 1e-50 and 0.0 tie there.
    """
    cutoffs = [(str(spec), spec.k) for spec in metrics]
    none_judged = dict.fromkeys([name for name, _ in cutoffs], 0.0)
    smallest = min(k for _, k in cutoffs)
    for query_id, query_scores in scores.items():
        row = evaluated[query_id]
        hits = query_scores.keys() & qrels[query_id].keys()  # C-level; empty when nothing is retrieved
        if not hits:
            row.update(none_judged)
            continue
        n = len(query_scores)
        ranks = _ranks(query_scores, hits) if smallest < n else []
        for name, k in cutoffs:
            row[name] = len(hits) / n if k >= n else bisect.bisect_right(ranks, k) / k


def _ranks(scores: dict[str, float], doc_ids: Collection[str]) -> list[int]:
    """The 1-based ranks of `doc_ids` in trec_eval's order (score, then doc_id, descending), ascending."""
    if len(doc_ids) == 1:  # the common case: one pass over the scores beats sorting them
        (doc_id,) = doc_ids
        score = scores[doc_id]
        at_least = [other for other in scores.values() if other >= score]
        tied = at_least.count(score)
        return [len(at_least) - tied + _tie_rank(scores, doc_id, score, tied)]
    ascending = sorted(scores.values())
    ranks = []
    for doc_id in doc_ids:
        score = scores[doc_id]
        low, high = bisect.bisect_left(ascending, score), bisect.bisect_right(ascending, score)
        ranks.append(len(ascending) - high + _tie_rank(scores, doc_id, score, high - low))
    return sorted(ranks)


def _tie_rank(scores: dict[str, float], doc_id: str, score: float, tied: int) -> int:
    """The 1-based place of `doc_id` among the `tied` documents scoring `score` (doc_id descending)."""
    if tied == 1:
        return 1
    tied_ids = [other for other, value in scores.items() if value == score]
    return 1 + sum(map(doc_id.__lt__, tied_ids))  # the tied doc_ids above this one
