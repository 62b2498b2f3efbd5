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
  (trec_eval's order, see `harness.records`); the rank column of a run file is ignored. Scores are
  compared as pytrec_eval compares them, as float32 (1e-50 ties 0.0, 1.00000001 ties 1.0), by every
  metric, Judged@k included: its top k is the one nDCG@k read.
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
  the number retrieved; 0 when nothing is retrieved (ir_measures ``Judged``, on trec_eval's order). Unjudged documents
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
from array import array
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
    cutoff: bool
    aliases: tuple[str, ...]
    uncut: str | None  # the trec_eval measure over the whole run, when the family has one


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
    """The metric table shipped in ``harness/data/metrics.csv``, in display order (read once)."""
    return read_metric_table(importlib.resources.files("harness").joinpath("data/metrics.csv").read_text("utf-8"))


def read_metric_table(text: str) -> dict[str, MetricFamily]:
    """The families of a metric table in the ``metrics.csv`` format, in its order.

    Raises:
        ValueError: A name given twice.
    """
    families: dict[str, MetricFamily] = {}
    for row in csv.DictReader(text.splitlines()):
        if row["name"] in families:
            raise ValueError(f"metrics.csv: duplicate metric {row['name']!r}")
        families[row["name"]] = MetricFamily(
            row["name"],
            row["trec_eval"] or None,
            row["description"],
            row["cutoff"] == "yes",
            tuple(row["aliases"].split(";")),
            row["uncut"] or None,
        )
    return families


@functools.cache
def _aliases() -> dict[str, str]:
    """Every lowercase name of a shipped family → the family (read once)."""
    return alias_table(metric_families())


def alias_table(families: dict[str, MetricFamily]) -> dict[str, str]:
    """Every lowercase name of a family in `families` → the family.

    Raises:
        ValueError: One name given to two families.
    """
    names: dict[str, str] = {}
    for family in families.values():
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
    k_text = raw[match.start("k") :]
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
    return (
        "use one of " + ", ".join(f"{f.name}@k" if f.cutoff else f.name for f in families.values()) + " (e.g. nDCG@10)"
    )


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
    return [MetricSpec(family.name, k) for family in metric_families().values() for k in (ks if family.cutoff else [0])]


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
    depth: int | None


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
    judged_scores = run.trec_eval_input(qrels)
    judgments = qrels.to_dict()  # plain dicts: what pytrec_eval takes, and C-level lookups below
    plan = _Plan(list(dict.fromkeys(metrics)))  # a metric named twice is computed (and kept) once
    trec = _trec_eval(judgments, judged_scores, plan.measured) if judged_scores and plan.measured else {}
    judged = _judged(judgments, judged_scores, plan.judged, trec) if plan.judged else {}
    per_query = plan.rows(qrels, trec, judged)
    n = len(qrels)
    # Every row holds its values in name order: the columns are one C-level transposition away.
    columns = zip(*map(dict.values, per_query.values())) if n else ()
    means = dict.fromkeys(plan.names, 0.0)
    means.update((name, math.fsum(column) / n) for name, column in zip(plan.names, columns))
    whole_run = any(not spec.k and families[spec.name].cutoff for spec in metrics)
    return Evaluation(
        means=means,
        per_query=per_query,
        n_queries=n,
        n_missing=sum(1 for query_id in qrels if not judged_scores.get(query_id)),
        n_unjudged=sum(1 for query_id in run if query_id not in per_query),  # a dict: C-level lookups
        depth=max(map(len, judged_scores.values()), default=0) if whole_run else None,
    )


class _Plan:
    """How each asked metric is read: from trec_eval's value under a key, from its recip_rank cut at k
    (MRR@k), or from `_judged` (Judged@k); and how one query's row is put together in the asked order."""

    def __init__(self, metrics: list[MetricSpec]):
        families = metric_families()
        self.names = [str(spec) for spec in metrics]
        self.judged = [spec for spec in metrics if spec.name == "Judged"]
        trec = [spec for spec in metrics if families[spec.name].trec_eval]
        self.cut = [spec for spec in trec if _measure(spec) in _UNCUT and spec.k]  # MRR@k
        direct = [spec for spec in trec if spec not in self.cut]
        self.keys = [_trec_key(spec) for spec in direct]
        # What trec_eval is asked: the direct metrics, recip_rank for MRR@k, P@k for Judged@k (see _judged).
        extra = [MetricSpec("MRR", 0)] * bool(self.cut) + [MetricSpec("P", spec.k) for spec in self.judged]
        self.measured = list(dict.fromkeys(direct + extra))
        computed = direct + self.cut + self.judged  # the order a row's values are put together in
        self.reorder = _getter([computed.index(spec) for spec in metrics])  # computed order → asked order

    def rows(self, qrels: Qrels, trec: dict[str, dict[str, float]], judged: dict[str, tuple[float, ...]]) -> _Values:
        """query_id → metric name → value for every judged query, each row made once, in the asked order.

        One comprehension, C-level calls only per query: a query trec_eval has no values for reads
        `blank` (zeros); MRR@k are looked up by the query's recip_rank (few distinct values)."""
        take, names, reorder = _getter(self.keys), self.names, self.reorder
        blank = dict.fromkeys([*self.keys, "recip_rank"], 0.0)
        no_judged = (0.0,) * len(self.judged)
        if not self.cut:
            return {
                query_id: dict(zip(names, reorder(take(trec.get(query_id, blank)) + judged.get(query_id, no_judged))))
                for query_id in qrels
            }
        cut = {value: self._cut(value) for value in {row["recip_rank"] for row in trec.values()} | {0.0}}
        return {
            query_id: dict(
                zip(
                    names,
                    reorder(
                        take(row := trec.get(query_id, blank))
                        + cut[row["recip_rank"]]
                        + judged.get(query_id, no_judged)
                    ),
                )
            )
            for query_id in qrels
        }

    def _cut(self, reciprocal_rank: float) -> tuple[float, ...]:
        """MRR@k for each asked k: trec_eval's recip_rank where the first relevant rank is ≤ k, else 0."""
        rank = _first_relevant_rank(reciprocal_rank)
        return tuple(reciprocal_rank if rank <= spec.k else 0.0 for spec in self.cut)


def _getter(keys: list):
    """A function giving the values under `keys` (of a dict or tuple) as a tuple: one C-level call per row."""
    if not keys:
        return lambda values: ()
    if len(keys) == 1:
        return lambda values: (values[keys[0]],)
    return operator.itemgetter(*keys)


def _trec_eval(qrels: _Grades, scores: _Values, metrics: Sequence[MetricSpec]) -> dict[str, dict[str, float]]:
    """pytrec_eval's values of `metrics`: query_id → trec_eval's key (`_trec_key`) → value."""
    import pytrec_eval

    by_measure: dict[str, list[MetricSpec]] = {}
    for spec in metrics:
        by_measure.setdefault(_measure(spec), []).append(spec)
    measure_strings = {
        m if m in _UNCUT or not specs[0].k else f"{m}." + ",".join(str(s.k) for s in specs)
        for m, specs in by_measure.items()
    }
    return pytrec_eval.RelevanceEvaluator(qrels, measure_strings).evaluate(scores)


def _trec_key(spec: MetricSpec) -> str:
    """The key of `spec`'s value in pytrec_eval's results (``ndcg_cut_10``, ``recip_rank``, ``Rprec``)."""
    measure = _measure(spec)
    return measure if measure in _UNCUT or not spec.k else f"{measure}_{spec.k}"


def _measure(spec: MetricSpec) -> str:
    """The trec_eval measure computing `spec`: the family's cut one, or its whole-run one when k is 0."""
    family = metric_families()[spec.name]
    return family.uncut if not spec.k and family.uncut else family.trec_eval


def _judged(
    qrels: _Grades, scores: _Values, metrics: Sequence[MetricSpec], trec: dict[str, dict[str, float]]
) -> dict[str, tuple[float, ...]]:
    """Judged@k at every k: query_id → the judged share of its top k (of those retrieved), in `metrics`
    order, on the ranking every other metric reads: trec_eval's order of the scores as pytrec_eval
    compares them (float32, so 1e-50 and 0.0 tie, and the top k is the one nDCG@k looked at).

    Where every judgment of a query is relevant, its judged documents in the top k are trec_eval's
    P@k × k (`trec` holds P@k). Otherwise only the ranks of the query's retrieved judged documents are
    computed, and only when some k is below the depth. A query with none retrieved is left out (0).
    """
    cutoffs = [spec.k for spec in metrics]
    smallest, largest = min(cutoffs), max(cutoffs)
    precision_at = _getter([f"P_{k}" for k in cutoffs])
    values = {}
    for query_id, query_scores in scores.items():
        judged = qrels[query_id]
        n, all_relevant = len(query_scores), min(judged.values(), default=0) >= 1
        if n >= largest and all_relevant:  # Judged@k = P@k: every k is full, every judgment relevant
            values[query_id] = precision_at(trec[query_id])
            continue
        hits = query_scores.keys() & judged.keys()  # C-level; empty when nothing is retrieved
        if not hits:
            continue
        if all_relevant:
            precision = precision_at(trec[query_id])
            values[query_id] = tuple(round(p * k) / min(k, n) for p, k in zip(precision, cutoffs))
            continue
        as_float32 = dict(zip(query_scores, array("f", query_scores.values())))  # as pytrec_eval has them
        ranks = _ranks(as_float32, hits) if smallest < n else []
        values[query_id] = tuple(len(hits) / n if k >= n else bisect.bisect_right(ranks, k) / k for k in cutoffs)
    return values


def _ranks(scores: dict[str, float], doc_ids: Collection[str]) -> list[int]:
    """The 1-based ranks of `doc_ids` in trec_eval's order (score, then doc_id, descending), ascending.

    The scores are compared as given: `_judged` gives them rounded to float32, as pytrec_eval has them."""
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
