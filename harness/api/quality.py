"""Is the eval set good enough (docs/build-an-eval-set.md): system-ranking agreement between two qrels, pool
reusability, pools under a judging budget, a calibration sample for LLM judges. Each returns a frozen outcome
object."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.api.judging import judge
from harness.api.settings import results_of, third_party_bars
from harness.errors import DatasetError, HarnessError, setting
from harness.evaluation.metrics import evaluate as evaluate_run
from harness.evaluation.metrics import parse_metric
from harness.io.formats import read_qrels, read_run
from harness.records import Qrels, Result, Run

if TYPE_CHECKING:
    from harness.io.service import EndpointSpec
    from harness.judging.llm import JudgeReport


def _examples(ids: Iterable[str], n: int = 3) -> str:
    """A few ids, quoted, for an error message."""
    ids = sorted(ids)
    return ", ".join(map(repr, ids[:n])) + (", ..." if len(ids) > n else "")


def _quality_qrels(source: str | Path, split: str = "test") -> Qrels:
    """Qrels from a qrels file, a BEIR folder's split, or a judgments CSV (one grade per pair)."""
    from harness.io.formats import locate_beir_folder

    path = Path(source)
    if path.is_dir():
        return read_qrels(locate_beir_folder(path, split).qrels)
    if not path.name.lower().removesuffix(".gz").endswith((".csv", ".jsonl")):
        return read_qrels(path)
    from harness.judging.merge import read_judgments

    grades: dict[str, dict[str, int]] = {}
    for j in read_judgments(path, annotator="judgments"):
        known = grades.setdefault(j.query_id, {}).setdefault(j.doc_id, j.grade)
        if known != j.grade:
            raise HarnessError(
                f"{path}:{j.line}: ({j.query_id}, {j.doc_id}) graded {known} and {j.grade}: several annotators' "
                "grades; merge them into a split first (`beir-harness judgments merge`) and give its qrels"
            )
    if not grades:
        raise HarnessError(f"{path}: no judgments; give a qrels file, a BEIR folder or a judgments CSV")
    return Qrels(grades)


def _named_runs(paths: Iterable[str | Path]) -> dict[str, Run]:
    """Each run file (or result file) by its tag; a tag two files share is replaced by each file's path."""
    from harness.judging.pool import load_run

    loaded = [load_run(Path(p)) for p in paths]
    tags = [run.name or path.stem for path, run in loaded]
    return {(tag if tags.count(tag) == 1 else str(path)): run for tag, (path, run) in zip(tags, loaded, strict=True)}


def rankings(
    qrels_a: str | Path,
    qrels_b: str | Path,
    runs: Iterable[str | Path] = (),
    *,
    pool: str | Path | None = None,
    metric: str = "nDCG@10",
    split: str = "test",
    top_k: int = 3,
    rounds: int = 1000,
    seed: int = 0,
) -> Any:
    """Do two qrels rank the systems the same way? (``judgments rankings``; `harness.evaluation.rankings`)

    Args:
        qrels_a: The reference qrels (the human ones): a qrels file, a BEIR folder (its `split`) or a judgments CSV.
        qrels_b: The other (the LLM's), the same forms.
        runs: Run or result files, the systems (named by their tags).
        pool: A pool folder whose systems' runs are taken too (named as its manifest names them).
        metric: The metric the systems are ranked by.
        split: A folder's split.
        top_k: The k of the top-k overlap.
        rounds, seed: The bootstrap over queries.

    Returns:
        A `harness.evaluation.rankings.RankingAgreement`: each system's score and rank under each, τ-b, τ_ap,
        the top-k overlap, each with its interval (``format_text()``, ``to_json()``).

    Raises:
        HarnessError: Fewer than two runs, no query judged in both qrels, unreadable files; before any scoring.
    """
    from harness.evaluation.rankings import compare_rankings

    named = {**(_pool_runs(pool)[1] if pool is not None else {}), **_named_runs(runs)}
    if len(named) < 2:
        raise HarnessError(f"{setting('runs')}: {len(named)} run given; ranking needs two or more systems")
    if top_k < 1 or rounds < 1:
        raise HarnessError(f"{setting('top_k')} {top_k}, {setting('rounds')} {rounds}: give values ≥ 1")
    spec = parse_metric(metric)
    a, b = _quality_qrels(qrels_a, split), _quality_qrels(qrels_b, split)
    common = sorted(set(a) & set(b))
    if not common:
        raise HarnessError(
            f"{qrels_b}: none of its {len(b)} judged queries is judged in {qrels_a} (e.g. {_examples(b)} vs "
            f"{_examples(a)}): the two qrels must judge the same queries"
        )
    scored = {}
    for label, qrels in (("a", a), ("b", b)):
        restricted = Qrels({q: qrels[q] for q in common})
        scored[label] = {
            name: {q: row[str(spec)] for q, row in evaluate_run(restricted, run, [spec]).per_query.items()}
            for name, run in named.items()
        }
    return compare_rankings(scored["a"], scored["b"], str(spec), (str(qrels_a), str(qrels_b)), top_k, rounds, seed)


def reusability(
    pool: str | Path,
    qrels: str | Path,
    *,
    metric: str = "nDCG@10",
    split: str = "test",
    groups: Mapping[str, str] | None = None,
    runs: Iterable[str | Path] = (),
) -> Any:
    """Is a pool reusable? Leave-one-system-out (with `groups`, leave-one-group-out) on the pool's systems.

    Args:
        pool: The pool folder (``beir-harness pool --out``): its manifest's depth and its systems' runs.
        qrels: The qrels made from its judgments: a qrels file, a BEIR folder (its `split`) or a judgments CSV.
        metric: The metric scored.
        split: A folder's split.
        groups: pool system name → group (a team's runs); systems not named are their own group.
        runs: Runs that did not contribute: scored with a warning, their Judged@k and unjudged top-k shown.

    Returns:
        A `harness.judging.reusability.Reusability` (``format_text()``, ``to_json()``).

    Raises:
        HarnessError: Not a pool folder, a group naming no pool system, unreadable files.
    """
    from harness.judging.reusability import leave_one_out

    depth, pooled = _pool_runs(pool)
    unknown = sorted(set(groups or {}) - set(pooled))
    if unknown:
        raise HarnessError(
            f"{setting('group')} {unknown[0]!r}: no such system in the pool (its systems: {', '.join(pooled)})"
        )
    return leave_one_out(_quality_qrels(qrels, split), pooled, depth, metric, groups, _named_runs(runs))


def _pool_runs(pool: str | Path) -> tuple[int, dict[str, Run]]:
    """A pool folder's depth and its systems' runs (``runs/``), by the names its manifest gives them."""
    import json

    pool = Path(pool)
    try:
        manifest = json.loads((pool / "manifest.json").read_text(encoding="utf-8"))
        depth, systems = int(manifest["depth"]), [(s["name"], pool / s["run"]) for s in manifest["systems"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(
            f"{pool}: not a pool folder ({exc}); give the folder that `beir-harness pool --out` wrote"
        ) from None
    return depth, {name: read_run(path) for name, path in systems}


def pool_on_budget(
    dataset: str | Path,
    out: str | Path,
    systems: Iterable[str] = (),
    runs: Iterable[str | Path] = (),
    *,
    budget: int,
    strategy: str = "rbp",
    **settings: Any,
) -> dict[str, Any]:
    """Pool at most `budget` pairs to judge, the first by `strategy` (``pool --budget N --strategy ...``).

    Args:
        dataset: A BEIR folder or installed registry dataset (qrels optional).
        out: The pool folder to create (never overwritten): the same files and blind page as `pool`'s.
        systems: As for `pool`.
        runs: As for `pool`.
        budget: The pairs to judge (``add`` pairs on top).
        strategy: ``rbp`` (rank-biased weight across systems, the default), ``depth`` (best rank first) or
            ``rrf`` (fused rank): `harness.judging.budget`; BENCHMARKS.md ("Pooling under a judging budget")
            compares them and gives the reason for the default.
        **settings: Any other `pool` keyword (``depth`` — the pool the budget picks from —, ``max_per_query``,
            ``add``, ``split``, ``seed``, ``scale``, ``guidelines``, ``progress``).

    Returns:
        The pool's manifest, with ``budget``, ``strategy`` and ``over_budget`` (the pairs left out).

    Raises:
        HarnessError: A budget below 1, an unknown strategy, or anything `pool` refuses; nothing written.
    """
    from harness.judging.pool import PoolSources, PoolSpec, build_pool

    known = {"depth", "max_per_query", "add", "split", "seed", "scale", "guidelines", "progress"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; pool takes {', '.join(sorted(known))}")
    progress = bool(settings.pop("progress", False))
    if settings.get("add"):
        settings["add"] = Path(settings["add"])
    if "scale" in settings:
        settings["scale"] = tuple(settings["scale"])
    spec = PoolSpec(budget=budget, strategy=strategy, **settings)
    with third_party_bars(progress):
        return build_pool(
            dataset,
            PoolSources((systems,) if isinstance(systems, str) else tuple(systems), tuple(Path(r) for r in runs)),
            out,
            spec,
            progress,
        )


def judge_sample(
    pool: str | Path, model: str, sample: int, endpoint: str | EndpointSpec | None = None, **settings: Any
) -> JudgeReport:
    """Grade a calibration sample of a pool with an LLM (``judge --sample N``): `judge` on N pairs only.

    Args:
        pool: The pool folder; the grades go to ``judgments-llm_<model>-sample.csv``, the pairs (blind, no
            grades) to ``calibration-sample.csv`` for a human to grade.
        model: The chat model, ``openai:MODEL``.
        sample: The pairs: every pooled query gets its share, spread over the ranks (`harness.judging.sample`).
        endpoint: As for `judge`.
        **settings: Any other `JudgeSpec` field (``sample_seed``, ``answer_attempts``, ``cache_dir``, ...).

    Returns:
        The `JudgeReport` of the sample (``sample_path``: the blind copy).

    Raises:
        HarnessError: A sample below 1 or below the pool's number of queries, or anything `judge` refuses;
            before any request.
    """
    return judge(pool, model, endpoint, sample=sample, **settings)


def pool_check(results: Iterable[Result | str | Path] | str | Path, pool: str | Path, *, k: int | None = None) -> tuple:
    """Each result against the pool its qrels came from (``report --pool``): in the pool or not, Judged@k and
    the unjudged documents of its top k.

    Args:
        results: Results, result files or folders (as `report` takes them).
        pool: The pool folder the split's judgments were made on (its manifest names the dataset).
        k: The depth measured; None: the pool's depth.

    Returns:
        A `harness.judging.reusability.PoolCheck` per result with a run (``format_text()``: a warning for a
        system the pool was built without).

    Raises:
        HarnessError: Not a pool folder, unreadable results or qrels.
    """
    import json

    from harness.judging.reusability import check_against_pool
    from harness.reporting.report import check_results, result_label

    depth, pooled = _pool_runs(pool)
    dataset = json.loads((Path(pool) / "manifest.json").read_text(encoding="utf-8"))["dataset"]
    checks = []
    for result in results_of(results, allow_mixed_data=True):
        if not result.run_path.is_file():
            continue
        check_results([result], run_file=True, note=False)  # the run checked is the one the result was scored on
        qrels = _quality_qrels(dataset, result.split)
        run = read_run(result.run_path)
        checks.append(check_against_pool(result_label(result), run, qrels, pooled, depth, k or depth))
    return tuple(checks)
