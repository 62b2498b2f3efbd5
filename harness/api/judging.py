"""The commands that build an eval set's judgments: pool (and its status), judge, judgments merge/agreement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.api.settings import third_party_bars
from harness.errors import HarnessError, setting
from harness.io.service import EndpointSpec
from harness.judging.llm import JudgeReport, JudgeSpec, judge_pool
from harness.judging.pool import PoolSpec, check_spec  # noqa: F401 - check_spec: the command line's

# The flat settings of the judging service (the command line's options), by the `EndpointSpec` field each sets.
JUDGE_ENDPOINT_SETTINGS = {
    "api_key_env": "api_key_env",
    "concurrency": "concurrency",
    "endpoint_timeout": "timeout",
    "price_per_1m_tokens": "price_per_1m_tokens",
}

if TYPE_CHECKING:
    from harness.judging.agreement import Agreement
    from harness.judging.merge import MergeReport


def pool(
    dataset: str | Path,
    out: str | Path,
    systems: Iterable[str] = (),
    runs: Iterable[str | Path] = (),
    *,
    depth: int = 10,
    max_per_query: int | None = None,
    add: str | Path | None = None,
    split: str | None = None,
    seed: int = 0,
    scale: Iterable[Mapping[str, Any]] | None = None,
    guidelines: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Pool the documents to judge (TREC depth-k) and write them with a blind judging page (the `pool` command).

    Args:
        dataset: A BEIR folder or installed registry dataset (qrels optional).
        out: The pool folder to create (never overwritten).
        systems: Systems as ``bench --systems`` writes them (models, fusions, ``LABEL=SYSTEM``; a comma-separated
            string or items), retrieved now, or with `runs` the runs to take (by tag or file name) and fuse.
        runs: Saved runs (TREC, MS MARCO, JSON) or result files to pool.
        depth: Top documents pooled from each system.
        max_per_query: At most this many documents per query (round-robin by rank).
        add: A file of extra (query id, document id) pairs to judge.
        split: Only this qrels split counts as judged; default every split.
        seed: Seeds the cap and the judging page's order.
        scale: The grade scale, ``[{"grade": 0, "label": "...", "definition": "..."}, ...]``; default 0-3.
        guidelines: The guidelines shown to the judges.
        progress: Progress bars of the systems retrieved.

    Returns:
        The pool's manifest (what ``manifest.json`` holds): counts, systems, settings.

    Raises:
        HarnessError: An existing `out`, unknown systems or runs, a bad scale.
    """
    from harness.io.outputs import check_output_dir
    from harness.judging.pool import PoolSources, build_pool

    check_output_dir(out, "pool folder")  # before any system retrieves
    extra = {
        **({"scale": tuple(scale)} if scale is not None else {}),
        **({"guidelines": guidelines} if guidelines is not None else {}),
    }
    spec = PoolSpec(
        depth=depth, max_per_query=max_per_query, seed=seed, add=Path(add) if add else None, split=split, **extra
    )
    with third_party_bars(progress):
        return build_pool(
            dataset,
            PoolSources((systems,) if isinstance(systems, str) else tuple(systems), tuple(Path(r) for r in runs)),
            out,
            spec,
            progress,
        )


def pool_status(pool: str | Path, dataset: str | Path | None = None, judgments: Iterable[str | Path] = ()):
    """How much of a pool (``beir-harness pool --out``) is judged: `harness.judging.status.pool_status`.

    Args:
        pool: The pool folder.
        dataset: The dataset it was made on; default: the one its manifest names.
        judgments: More judgments files (the judging page's exports) besides those in the pool folder.

    Returns:
        A `harness.judging.status.PoolStatus`: ``n_judged`` of ``n_pairs``, ``queries_by_state()``,
        ``annotators``, ``stale`` (the dataset files changed since pooling), ``to_json()``.
    """
    from harness.judging.status import pool_status as status  # lazy: judging loads the merge machinery

    return status(pool, dataset, judgments)


def judge(pool: str | Path, model: str, endpoint: str | EndpointSpec | None = None, **settings: Any) -> JudgeReport:
    """Grade every pair of a pool folder (``beir-harness pool``) with an LLM, as annotator ``llm:MODEL``.

    Args:
        pool: The pool folder; the grades go to its ``judgments-llm_<model>.csv`` (and a JSON summary).
        model: The chat model, ``openai:MODEL``, behind an OpenAI-compatible ``/chat/completions`` endpoint.
        endpoint: Its base URL (``http://localhost:8000/v1``) or a whole `EndpointSpec` (concurrency,
            timeout, retries, price); None: ``$BEIR_HARNESS_ENDPOINT``.
        **settings: Any other `JudgeSpec` field (``answer_attempts``, ``cache_dir``, ``use_cache``), or with a URL
            the service's settings by their flat names (``api_key_env``, ``concurrency``, ``endpoint_timeout``,
            ``price_per_1m_tokens``: `JUDGE_ENDPOINT_SETTINGS`).

    Returns:
        The `JudgeReport`: grades, pairs from the cache, malformed answers by kind, ungraded pairs, usage.

    Raises:
        HarnessError: A bad setting, not a pool folder, a pool not on 0-3, a refusing or failing service.
    """
    known = {spec.name for spec in fields(JudgeSpec)} - {"model", "endpoint"}
    unknown = sorted(set(settings) - known - set(JUDGE_ENDPOINT_SETTINGS))
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; judge takes {', '.join(sorted(known))}")
    service = {field: settings.pop(name) for name, field in JUDGE_ENDPOINT_SETTINGS.items() if name in settings}
    if isinstance(endpoint, EndpointSpec):
        if service:
            raise HarnessError(f"give either an EndpointSpec or {setting(next(iter(service)))}, not both")
        spec = endpoint
    else:
        spec = EndpointSpec(url=endpoint, **service)
    return judge_pool(pool, JudgeSpec(model, spec, **settings))


def parse_scale(text: str) -> tuple[int, int]:
    """A grade scale written LOW-HIGH: ``"0-3"`` → (0, 3), ``"-1-2"`` → (-1, 2) (the --scale of `judgments`).

    Raises:
        ValueError: Not LOW-HIGH with LOW < HIGH.
    """
    from harness.judging.merge import parse_scale as parse

    return parse(text)


def _scale(scale: tuple[int, int] | str) -> tuple[int, int]:
    if not isinstance(scale, str):
        return (int(scale[0]), int(scale[1]))
    try:
        return parse_scale(scale)
    except ValueError as exc:
        raise HarnessError(str(exc)) from None


def merge_judgments(
    folder: str | Path,
    files: Iterable[str | Path],
    split: str = "test",
    *,
    annotator: str | None = None,
    resolve: str = "majority",
    scale: tuple[int, int] | str = (0, 3),
    weights: str = "linear",
    write: bool = True,
    ties: str = "low",
) -> MergeReport:
    """Add judgment files (CSV or TREC qrels) to a split of a BEIR folder (``judgments merge``).

    Args:
        folder: The BEIR folder.
        files: Judgment files: CSV ``query_id,doc_id,grade[,annotator]`` or TREC qrels.
        split: The qrels split added to (created if absent).
        annotator: Annotator of rows that name none.
        resolve: ``majority``, ``mean``, ``max`` or ``strict`` (any disagreement refused).
        scale: The grade scale, ``(0, 3)`` or ``"0-3"``.
        weights: Cohen's κ weighting: ``none``, ``linear``, ``quadratic``.
        write: False checks and reports without writing.
        ties: Where the policy cannot decide: ``low`` (the lower grade), ``high`` or ``refuse``.

    Returns:
        The `MergeReport`: pairs added and changed, agreement, provenance.

    Raises:
        HarnessError: Unknown queries or documents, grades off the scale, an annotator grading a pair two ways,
            or (strict) a disagreement; nothing written.
    """
    from harness.judging.merge import merge_judgments as run_merge

    return run_merge(folder, list(files), split, annotator, resolve, _scale(scale), weights, write, ties)


def agreement(
    sources: Iterable[str | Path],
    split: str = "test",
    *,
    annotator: str | None = None,
    scale: tuple[int, int] | str = (0, 3),
    weights: str = "linear",
    level: str = "ordinal",
) -> Agreement:
    """Agreement of annotators on the pairs they both graded (``judgments agreement``).

    Args:
        sources: BEIR folders (their ``qrels/SPLIT.annotations.jsonl``) or judgment files.
        split: A folder's split whose annotations are read.
        annotator: Annotator of rows that name none (TREC qrels).
        scale: The grade scale, ``(0, 3)`` or ``"0-3"``.
        weights: Cohen's κ weighting: ``none``, ``linear``, ``quadratic``.
        level: Krippendorff's α level: ``ordinal``, ``interval``, ``nominal``.

    Returns:
        The `Agreement`: κ per annotator pair, α overall, confusion counts (``format_text()``).

    Raises:
        HarnessError: Unreadable sources, grades off the scale.
    """
    from harness.judging.agreement import agreement as measure
    from harness.judging.merge import judgment_votes

    low, high = _scale(scale)
    return measure(judgment_votes(list(sources), split, annotator, (low, high)), range(low, high + 1), weights, level)
