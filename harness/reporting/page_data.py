"""What the results page (`harness.reporting.html`) shows (`PageOptions`), its per-dataset drill-downs and
its provenance.

A drill-down reads what `inspect` reads — the dataset folder recorded in each result and the run file
beside it — once per dataset: the qrels, the texts of the queries shown, the titles of the documents shown
(one pass over the corpus), and each system's run. Texts are cut (titles to `TITLE_CHARS`, queries to
`QUERY_CHARS`) and every title is stored once per dataset, so the page stays small.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
from harness.evaluation.significance import DEFAULT_ROUNDS
from harness.io.provenance import format_provenance
from harness.presentation import metric_text
from harness.reporting.report import Result, check_results

logger = logging.getLogger(__name__)

TITLE_CHARS, QUERY_CHARS, JUDGED_SHOWN = 72, 300, 10


@dataclass(frozen=True)
class PageOptions:
    """What the page shows.

    Attributes:
        metric: The metric shown first; the worst queries, the scatter, significance and the intervals use it.
        split: One split per dataset: this one, else each dataset's registry evaluation split.
        published: Add published columns with their Δ (a toggle on the page).
        baseline: Mark cells that differ significantly from this system (`test`).
        alpha: Significance level.
        correction: ``holm``, ``bh``, ``bonferroni`` or ``none``: across the datasets of each system (`baseline`),
            across the pairs of each dataset (`resolution`).
        rounds: Randomization rounds and bootstrap resamples.
        resolution: Add the section of which differences are real (`harness.reporting.resolution.table`): every
            pair of systems tested, letters and rank intervals drawn, per dataset and on the mean over datasets.
        test: The paired test: ``randomization``, ``t`` or ``bootstrap``.
        seed: Seeds the randomization test and the bootstrap.
        worst: Worst queries per system and dataset in the drill-down.
        top: Retrieved documents shown per query.
        title: The page's heading.
        digits: Decimals of every metric value shown (`harness.presentation.metric_text`, as the tables).
        metrics: Several metrics: the page also shows them in one static table (`harness.reporting.tables`)
            above the leaderboard, systems as rows and dataset × metric as columns; empty: no such table.
        layout: That table's layout: ``wide``, or ``long`` (one row per system × dataset × metric).
        cost_axis: The cost of the Quality-against-cost section (`harness.reporting.frontier.COSTS`); None: as
            `harness.reporting.frontier.build_frontier` picks it (encode_s when half the results recorded it).
        within: A budget for that section (``"encode_s<=60,bytes_per_doc<=512"``): the best result inside it.
    """

    metric: str = "nDCG@10"
    split: str | None = None
    published: bool = False
    baseline: str | None = None
    alpha: float = 0.05
    correction: str = "holm"
    rounds: int = DEFAULT_ROUNDS
    resolution: bool = False
    test: str = "randomization"
    seed: int = 0
    worst: int = 20
    top: int = 5
    title: str = "Retrieval results"
    digits: int = 4
    metrics: tuple[str, ...] = ()
    layout: str = "wide"
    cost_axis: str | None = None
    within: str | None = None


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _system_drill(result: Result, metric: str, options: PageOptions, qrels) -> dict[str, Any]:
    """A system's worst queries on one dataset: value, top documents, ranks of judged documents."""
    from harness.io.trec import read_run

    values = {q: v[metric] for q, v in result.per_query.items() if metric in v}
    worst = sorted(values, key=lambda q: (values[q], q))[: options.worst]
    # Each item [query_id, value as shown, top [[doc_id, score], ...], {judged doc_id: rank}]: lists, not objects, for size.
    entry: dict[str, Any] = {"worst": [[q, metric_text(values[q], options.digits)] for q in worst]}
    path = result.run_path
    if not path.is_file():
        entry["missing"] = f"the run file {path} is missing: no retrieved documents to show"
        return entry
    check_results([result], run_file=True, note=False)  # an altered run file is refused, never drawn
    try:
        run = read_run(path)
    except HarnessError as exc:
        entry["missing"] = f"the run file cannot be read: {exc}"
        return entry
    for item in entry["worst"]:
        hits = run.get(item[0], ())
        ranks = {hit.doc_id: rank for rank, hit in enumerate(hits, start=1)}
        item.append([[hit.doc_id, round(hit.score, 4)] for hit in hits[: options.top]])
        item.append({doc_id: ranks[doc_id] for doc_id, _ in _judged(qrels.get(item[0], {})) if doc_id in ranks})
    return entry


def _judged(judgments: dict[str, int]) -> list[tuple[str, int]]:
    """The judged documents shown: highest grade first, then doc_id; at most `JUDGED_SHOWN`."""
    return sorted(judgments.items(), key=lambda item: (-item[1], item[0]))[:JUDGED_SHOWN]


def _dataset_drill(dataset: str, systems: dict[str, Result], options: PageOptions) -> dict[str, Any]:
    from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder
    from harness.io.trec import read_qrels

    first = next(iter(systems.values()))
    try:
        folder = locate_beir_folder(first.config["dataset_path"], first.split)
        qrels = read_qrels(folder.qrels)
    except (HarnessError, KeyError) as exc:
        return {"error": f"no drill-down: the dataset folder is not readable ({exc})"}
    drill: dict[str, Any] = {"systems": {}}
    for label, result in systems.items():
        if options.metric in result.metrics:
            drill["systems"][label] = _system_drill(result, options.metric, options, qrels)
    shown = {item[0] for entry in drill["systems"].values() for item in entry["worst"]}
    drill["queries"] = {
        q.query_id: _cut(q.text, QUERY_CHARS) for q in iter_queries(folder.queries) if q.query_id in shown
    }
    drill["judged"] = {q: {"n": len(qrels.get(q, {})), "docs": _judged(qrels.get(q, {}))} for q in sorted(shown)}
    needed = {doc_id for entry in drill["judged"].values() for doc_id, _ in entry["docs"]}
    needed |= {
        doc_id
        for entry in drill["systems"].values()
        for item in entry["worst"]
        for doc_id, _ in (item[2] if len(item) > 2 else ())
    }
    drill["grades"] = {q: {d: g for d, g in qrels.get(q, {}).items() if d in needed} for q in sorted(shown)}
    drill["titles"] = {
        doc.doc_id: _cut(doc.title or doc.text, TITLE_CHARS)
        for doc in iter_corpus(folder.corpus)
        if doc.doc_id in needed
    }
    ids = sorted({q for result in systems.values() for q in result.per_query})
    drill["scatter"] = {
        "ids": ids,
        "values": {
            label: _packed([result.per_query.get(q, {}).get(options.metric) for q in ids])
            for label, result in systems.items()
        },
    }
    return drill


MISSING = 255  # a query the system has no value for, in `_packed`


def _packed(values: list[float | None]) -> str:
    """Per-query values in [0, 1] for the scatter, one byte each (round(v · 254); `MISSING` for none), base64:
    1.33 characters a query instead of 6, at a resolution of 1/254 — enough for a plot; exact values stay
    in the result files."""
    import base64

    codes = bytes(MISSING if v is None else max(0, min(254, round(v * 254))) for v in values)
    return base64.b64encode(codes).decode("ascii")


def drilldowns(by_label: dict[str, dict[str, Result]], options: PageOptions) -> dict[str, Any]:
    """Per dataset: each system's worst queries, the texts and judgments they need, and per-query values."""
    datasets = sorted({dataset for systems in by_label.values() for dataset in systems})
    out = {}
    for dataset in datasets:
        systems = {label: results[dataset] for label, results in by_label.items() if dataset in results}
        out[dataset] = _dataset_drill(dataset, systems, options)
        logger.info("drill-down of %s: %d systems", dataset, len(systems))
    return out


_SETTINGS_SKIPPED = {"k_values", "dataset_path", "self_hit_policy_source", "threads", "batch_size", "doc_text"}


def provenance(by_label: dict[str, dict[str, Result]]) -> dict[str, Any]:
    """Per column: the model, its settings (of its first dataset), versions, and per dataset the configuration
    hash, the data fingerprints, the host, when it was made and where its qrels' grades came from (a merge's
    annotators, policy, ties and agreement; None for qrels that were not merged here)."""
    out = {}
    for label, results in by_label.items():
        first = next(iter(results.values()))
        settings = {
            key: value
            for key, value in first.config.items()
            if key not in _SETTINGS_SKIPPED and (value is None or isinstance(value, (str, int, float, bool)))
        }
        out[label] = {
            "model": first.model,
            "variant": first.variant or "(default configuration)",
            "settings": settings,
            "versions": first.versions,
            "datasets": {
                dataset: {
                    "config_hash": result.config_hash,
                    "created": result.created,
                    "host": " · ".join(str(result.host.get(k)) for k in ("cpu", "kernel_class") if result.host.get(k)),
                    **{name: value[:12] for name, value in result.fingerprints.items()},
                    "qrels_from": format_provenance(result.config["qrels_provenance"])
                    if result.config.get("qrels_provenance")
                    else None,
                }
                for dataset, result in sorted(results.items())
            },
        }
    return out
