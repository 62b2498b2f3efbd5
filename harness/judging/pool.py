"""TREC depth-k pooling: for every query, the union of each system's top-`depth` documents, minus the pairs
already judged, written as a pool folder a team judges with its judging page.

A pool folder holds ``pool.csv`` and ``pool.jsonl`` (query id and text, document id, title, text, an empty
grade; sorted by query and document id, so neither file tells which system found a document or at which
rank), ``manifest.json`` (systems, depth, cap, seed, the dataset's sha256 fingerprints, counts, grade
scale and guidelines) and ``judge.html`` (`harness.judging.page`). The folder appears complete or not at all.

With a per-query cap, documents are taken round-robin by rank across the systems: every system's rank 1,
then every rank 2, and so on, the systems visited in a per-query order shuffled with the seed (so no system
wins every tie), until the cap is reached. Pairs from an ``add`` file are kept on top of the cap.

With a judging budget (`PoolSpec.budget`), only that many pairs of the (capped) pool are kept, the first by
the budget strategy (`harness.judging.budget`: ``depth``, ``rrf`` or ``rbp``); ``add`` pairs stay on top.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from harness import __version__
from harness.datasets.catalog import resolve_dataset
from harness.errors import DatasetError, FormatError, HarnessError, OutputError, setting
from harness.io.exclusions import EXCLUSIONS_FOLDER, check_exclusion_ids, exclusions_path, read_exclusions
from harness.io.formats import (
    BeirFolder,
    atomic_writer,
    content_sha256,
    default_permissions,
    find_file,
    iter_corpus,
    iter_qrels,
    iter_queries,
    locate_corpus_and_queries,
    private_dir,
    read_run,
    write_run,
)
from harness.judging.budget import STRATEGIES, budget_pairs
from harness.judging.pool_systems import check_retrievable, fused_runs, parse_pool_systems, pick_members
from harness.records import Exclusions, Result, Run, model_slug
from harness.reporting.labels import tag_label

logger = logging.getLogger(__name__)

DEFAULT_SCALE = (
    {"grade": 0, "label": "Irrelevant", "definition": "The passage has nothing to do with the query."},
    {"grade": 1, "label": "Related", "definition": "The passage seems related to the query but does not answer it."},
    {
        "grade": 2,
        "label": "Highly relevant",
        "definition": "The passage has some answer for the query, but the "
        "answer may be a bit unclear or hidden among extraneous "
        "information.",
    },
    {
        "grade": 3,
        "label": "Perfectly relevant",
        "definition": "The passage is dedicated to the query and contains the exact answer.",
    },
)
DEFAULT_GUIDELINES = (
    "Judge each document on its own against the query, as a searcher who typed the query would. "
    "You do not see which system found it or at which rank. Skip (s) when you cannot tell; "
    "go back (b or ←) to change a grade."
)
POOL_COLUMNS = ("query_id", "query", "doc_id", "title", "text", "grade")


@dataclass(frozen=True)
class PoolSpec:
    """How to pool.

    Attributes:
        depth: Documents taken from the top of each system's ranking (TREC depth-k), at least 1.
        max_per_query: At most this many documents per query (round-robin by rank, see the module); None: no cap.
        seed: Seeds the cap's round-robin order and the judging page's order.
        add: A file of extra (query id, document id) pairs, one per line, tab- or comma-separated.
        split: Only this qrels split counts as judged; None: every ``qrels/*.tsv`` of the folder.
        scale: The grade scale (``grade``, ``label``, ``definition`` each).
        guidelines: The guidelines shown on the judging page.
        budget: At most this many pairs (besides ``add``'s), the first by `strategy`; None: the whole pool.
        strategy: How a budget picks pairs: ``rbp`` (the default: BENCHMARKS.md, "Pooling under a judging
            budget"), ``depth`` or ``rrf`` (`harness.judging.budget`).
    """

    depth: int = 10
    max_per_query: int | None = None
    seed: int = 0
    add: Path | None = None
    split: str | None = None
    scale: tuple[Mapping, ...] = DEFAULT_SCALE
    guidelines: str = DEFAULT_GUIDELINES
    budget: int | None = None
    strategy: str = "rbp"


@dataclass
class Pool:
    """A computed pool: query id → pooled document ids (sorted), and how many pairs were dropped and why."""

    pairs: dict[str, list[str]]
    judged_dropped: int = 0
    capped_out: int = 0
    added: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    over_budget: int = 0


def check_spec(spec: PoolSpec) -> None:
    """Refuse a depth or cap below 1 and a scale without distinct integer grades (before any retrieval)."""
    if spec.depth < 1:
        raise HarnessError(
            f"pool depth {spec.depth}: pool at least the top 1 document of each system "
            f"(set {setting('depth')} ≥ 1; TREC pools use 10 to 100)"
        )
    if spec.max_per_query is not None and spec.max_per_query < 1:
        raise HarnessError(f"max per query {spec.max_per_query}: give a cap ≥ 1, or none")
    if spec.budget is not None and spec.budget < 1:
        raise HarnessError(f"{setting('budget')} {spec.budget}: give a budget of at least 1 pair to judge, or none")
    if spec.strategy not in STRATEGIES:
        raise HarnessError(f"{setting('strategy')} {spec.strategy!r}: use one of {', '.join(STRATEGIES)}")
    grades = [entry.get("grade") for entry in spec.scale]
    if (
        not grades
        or any(not isinstance(g, int) or isinstance(g, bool) or not 0 <= g <= 9 for g in grades)
        or len(set(grades)) != len(grades)
    ):
        raise HarnessError(f"grade scale {grades}: grades must be distinct integers 0-9 (one key each)")


def pool_runs(
    runs: Sequence[Run],
    depth: int,
    judged: Mapping[str, Iterable[str]],
    max_per_query: int | None = None,
    seed: int = 0,
    extra: Iterable[tuple[str, str]] = (),
) -> Pool:
    """The depth-`depth` pool of `runs`, minus the `judged` pairs, capped and extended by `extra`.

    Args:
        runs: One run per system.
        depth: Top documents taken from each run for each query.
        judged: query id → documents already judged (never pooled again).
        max_per_query: The cap (round-robin by rank across systems, systems in a seeded order per query).
        seed: Seeds that order.
        extra: More (query, document) pairs, kept on top of the cap (unless already judged).
    """
    judged_sets = {query_id: set(docs) for query_id, docs in judged.items()}
    pool = Pool({})
    for query_id in sorted({q for run in runs for q in run}):
        seen = judged_sets.get(query_id, set())
        ranked = [[scored.doc_id for scored in run.get(query_id, ())[:depth]] for run in runs]
        order = list(range(len(runs)))
        random.Random(f"{seed}:{query_id}").shuffle(order)
        chosen: dict[str, None] = {}
        for rank in range(max(map(len, ranked), default=0)):
            for system in order:
                if rank < len(ranked[system]) and ranked[system][rank] not in seen:
                    chosen.setdefault(ranked[system][rank])
        pool.judged_dropped += len({d for docs in ranked for d in docs} & seen)
        kept = list(chosen)[:max_per_query] if max_per_query else list(chosen)
        pool.capped_out += len(chosen) - len(kept)
        if kept:
            pool.pairs[query_id] = kept
    for query_id, doc_id in extra:
        docs = pool.pairs.setdefault(query_id, [])
        if doc_id in judged_sets.get(query_id, set()):
            pool.judged_dropped += 1
        elif doc_id not in docs:
            docs.append(doc_id)
            pool.added += 1
    pool.pairs = {q: sorted(docs) for q, docs in pool.pairs.items() if docs}
    return pool


def within_budget(pool: Pool, runs: Sequence[Run], spec: PoolSpec, added: set[tuple[str, str]]) -> None:
    """Keep `spec.budget` of the pool's pairs (the first by `spec.strategy`) and every added pair."""
    candidates = {q: [d for d in docs if (q, d) not in added] for q, docs in pool.pairs.items()}
    chosen = budget_pairs(runs, spec.depth, spec.budget, spec.strategy, candidates)
    pool.over_budget = sum(map(len, candidates.values())) - sum(map(len, chosen.values()))
    kept = {q: set(chosen.get(q, ())) | {d for d in docs if (q, d) in added} for q, docs in pool.pairs.items()}
    pool.pairs = {q: sorted(docs) for q, docs in kept.items() if docs}


def judged_pairs(folder: BeirFolder, split: str | None) -> tuple[dict[str, set[str]], dict[str, str]]:
    """Every judged (query, document) pair of the folder's qrels (one split, or all), and each file's sha256.

    A folder without ``qrels/`` (a team starting from nothing) has no judged pair.
    """
    qrels_dir = folder.root / "qrels"
    if split is not None:
        path = find_file(qrels_dir / f"{split}.tsv")
        if path is None:
            raise DatasetError(
                f"{folder.root}: no qrels/{split}.tsv to take judged pairs from "
                f"(leave {setting('split')} unset to use every split, or none)"
            )
        files = [path]
    else:
        files = sorted(qrels_dir.glob("*.tsv*")) if qrels_dir.is_dir() else []
    judged: dict[str, set[str]] = {}
    fingerprints = {}
    for path in files:
        # Every line, not read_qrels: a header-only file (a team that has judged nothing yet) is no error here.
        for _, query_id, doc_id, _ in iter_qrels(path):
            judged.setdefault(query_id, set()).add(doc_id)
        fingerprints[path.name.split(".")[0]] = content_sha256(path)
    return judged, fingerprints


def excluded_pairs(
    folder: BeirFolder, split: str | None, queries: Mapping[str, str], corpus_ids: set[str]
) -> tuple[Exclusions, dict[str, str]]:
    """The folder's excluded pairs (`harness.io.exclusions`: one split's ``excluded/<split>.tsv``, or every split's),
    each id checked against the folder, and each file's sha256."""
    files = sorted((folder.root / EXCLUSIONS_FOLDER).glob("*.tsv*")) if split is None else []
    if split is not None and exclusions_path(folder.root, split) is not None:
        files = [exclusions_path(folder.root, split)]
    pairs: dict[str, set[str]] = {}
    fingerprints = {}
    for path in files:
        check_exclusion_ids(path, queries, corpus_ids)
        for query_id, docs in read_exclusions(path).pairs.items():
            pairs.setdefault(query_id, set()).update(docs)
        fingerprints[path.name.split(".")[0]] = content_sha256(path)
    return Exclusions({query_id: frozenset(docs) for query_id, docs in pairs.items()}), fingerprints


def read_pairs(path: Path, queries: Mapping[str, str], corpus_ids: set[str]) -> list[tuple[str, str]]:
    """The (query id, document id) pairs of an ``add`` file: two tab- or comma-separated columns a line (a
    ``query-id``/``query_id`` header and any further columns are ignored), every id known to the folder."""
    pairs = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(path, f"cannot read: {exc}") from exc
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        columns = [c.strip() for c in (line.split("\t") if "\t" in line else line.split(","))]
        if line_no == 1 and columns[0].lower() in ("query-id", "query_id", "qid"):
            continue
        if len(columns) < 2 or not columns[0] or not columns[1]:
            raise FormatError(path, "expected query id and document id, tab- or comma-separated", line_no)
        query_id, doc_id = columns[:2]
        if query_id not in queries:
            raise FormatError(
                path, f"unknown query id {query_id!r}", line_no, "use an _id of the folder's queries.jsonl"
            )
        if doc_id not in corpus_ids:
            raise FormatError(
                path, f"unknown document id {doc_id!r}", line_no, "use an _id of the folder's corpus.jsonl"
            )
        pairs.append((query_id, doc_id))
    return pairs


def check_run(run: Run, source: str, queries: Mapping[str, str], corpus_ids: set[str]) -> None:
    """Refuse a run naming a query or document the folder does not have (it was made on other data)."""
    for query_id, ranked in run.items():
        if query_id not in queries:
            raise DatasetError(
                f"{source}: query {query_id!r} is not in the folder's queries.jsonl "
                "(was this run made on another dataset?)"
            )
        unknown = next((s.doc_id for s in ranked if s.doc_id not in corpus_ids), None)
        if unknown is not None:
            raise DatasetError(
                f"{source}: document {unknown!r} (query {query_id!r}) is not in the folder's "
                "corpus.jsonl (was this run made on another dataset?)"
            )


def load_run(path: Path) -> tuple[Path, Run]:
    """A run file, or a beir-harness result file (its scored run beside it, named by the result's label).

    Raises:
        HarnessError: A result file whose run file is missing; a run file that cannot be read.
    """
    try:
        result = Result.from_json(path) if path.suffix == ".json" else None
    except HarnessError:  # not a result file: read as a run
        result = None
    if result is None:
        run = read_run(path)
        return path, run.renamed(tag_label(run.name))
    if not result.run_path.is_file():
        raise HarnessError(
            f"{path}: its run file {result.run_path.name} is missing; rerun the evaluation, or give a run file"
        )
    return path, read_run(result.run_path).renamed(result.label or result.model)


def pick_runs(
    systems: Sequence[str], run_files: Sequence[Path], loaded: Sequence[tuple[Path, Run]] | None = None
) -> list[tuple[str, Run]]:
    """(name, run) of each saved run or result file (`load_run`); with `systems`, only the runs whose tag or
    file name each system names.

    Raises:
        HarnessError: A named system has no run among the files (naming the runs there are).
    """
    runs = list(loaded) if loaded is not None else [load_run(path) for path in run_files]
    if not systems:
        return [(run.name, run) for _, run in runs]
    found = []
    for system in systems:
        match = next(((p, r) for p, r in runs if system in (r.name, p.name, p.stem, str(p))), None)
        if match is None:
            available = ", ".join(f"{r.name} ({p.name})" for p, r in runs)
            raise HarnessError(
                f"system {system!r}: no run among the run files ({available}); add its run file, "
                "or drop it from the systems"
            )
        found.append((system, match[1]))
    return found


def retrieve_runs(
    configs: Sequence, systems: Sequence[str], workdir: Path, progress: bool = False
) -> list[tuple[str, Run]]:
    """Each system's run over every query (`harness.pipeline.retrieve`: no judgments needed), by its checked
    config (`harness.judging.pool_systems.check_retrievable`: the defaults of ``beir-harness retrieve``, 100
    documents or the pool's depth when deeper); the run files go to `workdir`."""
    from dataclasses import replace

    from harness.pipeline.retrieve import retrieve

    return [
        (system, retrieve(replace(config, progress=progress), workdir / f"run-{number}.trec"))
        for number, (system, config) in enumerate(zip(systems, configs))
    ]


def pool_id(fingerprints: Mapping, pool: Pool) -> str:
    """A short id for the pool: its data and pairs (the judging page's autosave key)."""
    digest = hashlib.sha256(json.dumps([fingerprints, pool.pairs], sort_keys=True).encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class PoolSources:
    """Where a pool's runs come from: systems retrieved now, or saved run files (then `systems` picks among them)."""

    systems: tuple[str, ...] = ()
    run_files: tuple[Path, ...] = ()


def build_pool(
    dataset: str | Path, sources: PoolSources, out: str | Path, spec: PoolSpec = PoolSpec(), progress: bool = False
) -> dict:
    """Pool `dataset` (a BEIR folder, or an installed registry dataset; qrels optional) and write the pool folder.

    Returns:
        The manifest written.

    Raises:
        HarnessError: A bad spec, a system with no run, a run or ``add`` file naming unknown ids, an existing `out`;
            nothing is written then.
    """
    check_spec(spec)
    out = Path(out)
    if out.exists():
        raise OutputError(
            f"{out}: already exists; a pool is never overwritten (its judgments may be in it): "
            "choose another output folder"
        )
    if not sources.systems and not sources.run_files:
        raise HarnessError("nothing to pool: name systems to retrieve with, or give saved run files")
    plan = parse_pool_systems(sources.systems) if sources.systems else None  # every spec, before any work
    root, _ = resolve_dataset(dataset, download=False, progress=progress)
    loaded = [load_run(path) for path in sources.run_files]
    if plan is not None and loaded:
        pick_members(plan, loaded)
    configs = check_retrievable(root, plan, spec.depth) if plan is not None and not loaded else []
    folder = locate_corpus_and_queries(root)
    queries = {q.query_id: q.text for q in iter_queries(folder.queries)}
    corpus_ids = {doc.doc_id for doc in iter_corpus(folder.corpus)}
    judged, qrels_fingerprints = judged_pairs(folder, spec.split)
    excluded, excluded_fingerprints = excluded_pairs(folder, spec.split, queries, corpus_ids)
    extra = read_pairs(spec.add, queries, corpus_ids) if spec.add else []
    extra = [(query_id, doc_id) for query_id, doc_id in extra if doc_id not in excluded.of(query_id)]
    out.parent.mkdir(parents=True, exist_ok=True)
    work = private_dir(out.parent, f".{out.name}")
    try:
        if loaded:
            runs = pick_runs(plan.retrieve if plan else (), sources.run_files, loaded)
        else:
            runs = retrieve_runs(configs, plan.retrieve, work, progress)
        if plan is not None:
            runs = fused_runs(plan, dict(runs))  # the systems listed, in order; fusions of their members' runs
        for name, run in runs:
            check_run(run, str(run.metadata.get("source", name)), queries, corpus_ids)
        runs = [(name, run.without(excluded)) for name, run in runs]  # no excluded pair is ever pooled
        pool = pool_runs([run for _, run in runs], spec.depth, judged, spec.max_per_query, spec.seed, extra)
        if spec.budget is not None:
            within_budget(pool, [run for _, run in runs], spec, set(extra))
        fingerprints = {
            "corpus": content_sha256(folder.corpus),
            "queries": content_sha256(folder.queries),
            "qrels": qrels_fingerprints,
            **({"excluded": excluded_fingerprints} if excluded_fingerprints else {}),
        }
        manifest = _manifest(spec, runs, fingerprints, pool, len(queries), str(root))
        for stale in work.glob("run-*.trec"):
            stale.unlink()
        for number, (name, run) in enumerate(runs):
            write_run(run, work / "runs" / f"{number + 1}-{model_slug(name)}.trec")
        write_pool_files(work, pool, queries, folder.corpus, manifest)
        default_permissions(work, folder=True)
        os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    logger.info(
        "pool of %d pairs over %d queries → %s", manifest["counts"]["pairs"], manifest["counts"]["queries_pooled"], out
    )
    return manifest


def _manifest(spec: PoolSpec, runs, fingerprints: dict, pool: Pool, n_queries: int, dataset: str) -> dict:
    return {
        "pool_id": pool_id(fingerprints, pool),
        "harness_version": __version__,
        "dataset": dataset,
        "systems": [{"name": name, "run": f"runs/{n + 1}-{model_slug(name)}.trec"} for n, (name, _) in enumerate(runs)],
        "depth": spec.depth,
        "max_per_query": spec.max_per_query,
        "cap_policy": "round-robin by rank across systems, systems in a seeded order per query; added pairs on top",
        "seed": spec.seed,
        "split": spec.split,
        "fingerprints": fingerprints,
        "counts": {
            "queries": n_queries,
            "queries_pooled": len(pool.pairs),
            "pairs": sum(len(d) for d in pool.pairs.values()),
            "already_judged": pool.judged_dropped,
            "capped_out": pool.capped_out,
            "added": pool.added,
        },
        "grade_scale": [dict(entry) for entry in spec.scale],
        "guidelines": spec.guidelines,
        **_budget_fields(spec, pool),
    }


def _budget_fields(spec: PoolSpec, pool: Pool) -> dict:
    """The budget and its strategy, in the manifests of budget pools only (other manifests keep their fields)."""
    if spec.budget is None:
        return {}
    return {"budget": spec.budget, "strategy": spec.strategy, "over_budget": pool.over_budget}


def write_pool_files(folder: Path, pool: Pool, queries: Mapping[str, str], corpus_path: Path, manifest: dict) -> None:
    """pool.csv, pool.jsonl, manifest.json and judge.html of `pool` into `folder`; the manifest gets the
    documents judged once for a twin of the same text (``same_text``: query → document → the one shown)."""
    from harness.judging.page import render_judge_page, same_text

    wanted = {doc_id for docs in pool.pairs.values() for doc_id in docs}
    docs = {doc.doc_id: doc for doc in iter_corpus(corpus_path) if doc.doc_id in wanted}
    rows = [
        {"query_id": q, "query": queries[q], "doc_id": d, "title": docs[d].title, "text": docs[d].text, "grade": ""}
        for q, doc_ids in pool.pairs.items()
        for d in doc_ids
    ]
    copies = same_text(rows)
    manifest["counts"]["same_text"] = len(copies)
    manifest["same_text"] = {
        q: {d: shown for (query, d), shown in copies.items() if query == q} for q in dict.fromkeys(q for q, _ in copies)
    }
    with atomic_writer(folder / "pool.csv") as handle:
        writer = csv.DictWriter(handle, fieldnames=POOL_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    with atomic_writer(folder / "pool.jsonl") as handle:
        handle.writelines(json.dumps({**row, "grade": None}, ensure_ascii=False) + "\n" for row in rows)
    with atomic_writer(folder / "manifest.json") as handle:
        handle.write(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    with atomic_writer(folder / "judge.html") as handle:
        handle.write(render_judge_page(manifest, rows))
