"""Commands that build an eval set: pool (the documents to judge, and the blind judging page) and judge (LLM
pre-judgments of a pool, as their own annotator)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.api.choices import budget_strategies
from harness.cli.options import (
    API_KEY_ENV,
    CACHE_DIR,
    CONCURRENCY,
    DEPTH,
    ENDPOINT_TIMEOUT,
    ENDPOINT_URL,
    JSON,
    OUT,
    PRICE_PER_1M_TOKENS,
    RUNS,
    SEED,
    SERVICE,
    SPLIT,
    SYSTEMS,
    USE_CACHE,
)

# The chat model's service: the endpoint options with help of their own (evaluate's start "With --endpoint: ").
JUDGE_SERVICE = (
    SERVICE.plus(
        ENDPOINT_URL.but(
            help="The service, e.g. https://api.openai.com/v1 or http://localhost:8000/v1 "
            "[default: $BEIR_HARNESS_ENDPOINT]."
        )
    )
    .but(API_KEY_ENV, help="The environment variable holding the API key (never written anywhere).")
    .but(CONCURRENCY, help="Requests in flight.")
    .but(ENDPOINT_TIMEOUT, help="Seconds to wait for one answer (then retried).")
    .but(PRICE_PER_1M_TOKENS, help="Record the cost of the tokens the service reports.")
)


def _systems(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    """The --systems text as given: the API splits it as `bench --systems` does (commas inside a fusion stay)."""
    return (value,) if value and value.strip() else ()


def _guidelines(path: Path | None) -> dict:
    """The scale and guidelines of a --guidelines file: JSON ({"scale": [...], "guidelines": "..."}) or plain text."""
    from harness.errors import FormatError

    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(path, f"cannot read: {exc}") from exc
    if path.suffix.lower() != ".json":
        return {"guidelines": text.strip()}
    try:
        data = json.loads(text)
        scale = tuple(
            {"grade": e["grade"], "label": str(e["label"]), "definition": str(e.get("definition", ""))}
            for e in data.get("scale", ())
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise FormatError(
            path,
            f"not a guidelines file: {exc}",
            hint='write {"scale": [{"grade": 0, "label": "...", "definition": "..."}], "guidelines": "..."}',
        ) from exc
    if scale:
        from harness.api.judging import PoolSpec, check_spec
        from harness.errors import HarnessError

        try:
            check_spec(PoolSpec(scale=scale))
        except HarnessError as exc:
            raise FormatError(path, str(exc)) from None
    return {
        **({"scale": scale} if scale else {}),
        **({"guidelines": str(data["guidelines"])} if data.get("guidelines") else {}),
    }


@click.command()
@click.argument("dataset", type=click.Path(path_type=Path), required=False)
@SYSTEMS.but(callback=_systems)
@RUNS.but(
    help="Saved runs to pool (TREC, MS MARCO or JSON, as `evaluate --run`), or result files "
    "(their scored run). Repeatable.",
)
@DEPTH.but(type=int, default=10, help="Top documents pooled from each system.")
@click.option(
    "--max-per-query",
    type=int,
    default=None,
    metavar="N",
    help="At most N documents per query: round-robin by rank across systems (systems in a seeded order).",
)
@click.option(
    "--add",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    metavar="FILE",
    help="Extra (query id, document id) pairs to judge, one a line, tab- or comma-separated.",
)
@SPLIT.but(default=None, show_default=False, help="Only this qrels split counts as judged [default: every split].")
@SEED.but(help="Seeds the cap and the judging page's order.")
@click.option(
    "--guidelines",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    metavar="FILE",
    help='Guidelines for the judges: a text file, or JSON {"scale": [{"grade", "label", '
    '"definition"}, ...], "guidelines": "..."} [default: 0-3, UMBRELA style].',
)
@OUT.but(
    type=click.Path(path_type=Path, file_okay=False),
    help="The pool folder to create (never overwritten). Required unless --status.",
)
@click.option(
    "--status",
    "status_of",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    metavar="POOL_DIR",
    help="Instead of pooling: how much of the pool in POOL_DIR is judged (by the "
    "dataset's qrels, the judgments files in POOL_DIR, and --judgments).",
)
@click.option(
    "--judgments",
    "judgment_files",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    metavar="FILE",
    help="With --status: more judgments files (the judging page's exports). Repeatable.",
)
@click.option(
    "--budget",
    type=int,
    default=None,
    metavar="N",
    help="Judge at most N pairs of the depth-k pool, the first by --strategy [default: the whole pool].",
)
@click.option(
    "--strategy",
    type=click.Choice(budget_strategies()),
    default="rbp",
    show_default=True,
    help="Which pairs a --budget judges first: rank-biased weight across systems (rbp; BENCHMARKS.md's pick), "
    "best rank (depth) or fused rank (rrf).",
)
@JSON.but(help="Print the manifest (with --status: the status) as JSON.")
@click.pass_context
def pool(
    ctx: click.Context,
    dataset: Path | None,
    systems: tuple[str, ...],
    run_files: tuple[Path, ...],
    depth: int,
    max_per_query: int | None,
    add: Path | None,
    split: str | None,
    seed: int,
    guidelines: Path | None,
    out: Path | None,
    status_of: Path | None,
    judgment_files: tuple[Path, ...],
    budget: int | None,
    strategy: str,
    as_json: bool,
) -> None:
    """Pool the documents to judge (TREC depth-k) and write them with a blind judging page.

    For every query of DATASET (a BEIR folder; qrels optional), the union of each system's top --depth
    documents, minus the pairs already judged. OUT gets pool.csv, pool.jsonl, manifest.json, the runs and
    judge.html: open it in a browser to judge, one query and document at a time. With --status POOL_DIR
    instead: how much of that pool is judged, per query and per annotator (DATASET then defaults to the
    manifest's).

    Example:

    \b
        beir-harness pool ./my-set --systems "bm25, all-MiniLM-L6-v2" --depth 10 --out pool/
        beir-harness pool ./my-set --systems "bm25, e5=intfloat/e5-small-v2, rrf(bm25, e5)" --out pool/
        beir-harness pool ./my-set --runs a.trec --runs b.trec --depth 20 --max-per-query 30 --out pool/
        beir-harness pool ./my-set --runs a.trec --runs b.trec --budget 500 --out pool/
        beir-harness pool --status pool/
    """
    from harness.api import pool as run_pool
    from harness.api import pool_on_budget

    if status_of is not None:
        _status(ctx, dataset, status_of, judgment_files, as_json)
        return
    if dataset is None or out is None:
        raise click.UsageError("give DATASET and --out to pool (or --status POOL_DIR for a pool's progress)")
    if judgment_files:
        raise click.UsageError("--judgments goes with --status POOL_DIR")
    if ctx.get_parameter_source("strategy") == click.core.ParameterSource.COMMANDLINE and budget is None:
        raise click.UsageError("--strategy orders the pairs a --budget N judges: give --budget too")
    on_budget = {"budget": budget, "strategy": strategy} if budget is not None else {}
    manifest = (pool_on_budget if on_budget else run_pool)(
        dataset,
        out,
        systems,
        run_files,
        **on_budget,
        depth=depth,
        max_per_query=max_per_query,
        add=add,
        split=split,
        seed=seed,
        **_guidelines(guidelines),
    )
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
        return
    counts = manifest["counts"]
    click.echo(
        f"{out}: {counts['pairs']} pairs to judge over {counts['queries_pooled']} of {counts['queries']} "
        f"queries ({len(manifest['systems'])} systems, depth {depth}; {counts['already_judged']} already "
        f"judged, {counts['capped_out']} over the cap, {counts['added']} added); open {out / 'judge.html'}"
    )
    if "budget" in manifest:
        click.echo(
            f"budget {manifest['budget']} pairs, judged first by {manifest['strategy']}: "
            f"{manifest['over_budget']} pairs of the depth-{depth} pool left over the budget"
        )
    if counts.get("same_text"):
        click.echo(
            f"{counts['same_text']} pooled documents have the text of another of their query: each is judged "
            "once, its grade given to every id (marked same_text_as in the exports)"
        )


def _status(
    ctx: click.Context, dataset: Path | None, pool_dir: Path, judgment_files: tuple[Path, ...], as_json: bool
) -> None:
    """`pool --status`: refuses the pooling options, which would be silently ignored."""
    from harness.api import pool_status

    given = [
        f"--{name.replace('_', '-')}"
        for name in (
            *("systems", "run_files", "depth", "max_per_query", "add", "split", "seed", "guidelines", "out"),
            *("budget", "strategy"),
        )
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        raise click.UsageError(
            f"{', '.join(given).replace('--run-files', '--runs')}: pooling options, not for "
            "--status POOL_DIR (which takes DATASET, --judgments and --json)"
        )
    status = pool_status(pool_dir, dataset, judgment_files)
    click.echo(json.dumps(status.to_json(), indent=2) if as_json else status.format_text())


@click.command()
@click.argument("pool_dir", metavar="POOL_DIR", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--llm",
    "model",
    required=True,
    metavar="openai:MODEL",
    help="The chat model that grades, behind an OpenAI-compatible /chat/completions endpoint.",
)
@JUDGE_SERVICE
@click.option(
    "--answer-attempts",
    type=int,
    default=3,
    show_default=True,
    help="Questions per pair while its answers are malformed; then it is left ungraded.",
)
@CACHE_DIR
@USE_CACHE.but(help="Reuse the grades stored before; --no-cache asks every pair and stores nothing.")
@click.option(
    "--sample",
    type=int,
    default=None,
    metavar="N",
    help="Grade only a calibration sample of N pairs (every query, ranks spread), written blind for a human too.",
)
@click.option("--sample-seed", type=int, default=0, show_default=True, help="Seeds the sample.")
@JSON.but(help="Print the summary as JSON.")
def judge(
    pool_dir: Path,
    model: str,
    endpoint: str | None,
    api_key_env: str,
    concurrency: int,
    endpoint_timeout: float,
    answer_attempts: int,
    price_per_1m_tokens: float | None,
    cache_dir: Path | None,
    use_cache: bool,
    sample: int | None,
    sample_seed: int,
    as_json: bool,
) -> None:
    """Pre-judge a pool with an LLM, as its own annotator llm:MODEL, to be measured before it is trusted.

    Every pair of POOL_DIR (made by `beir-harness pool`) is graded 0-3 with the UMBRELA prompt; grades go
    to POOL_DIR/judgments-llm_MODEL.csv (never into a qrels file: merge it with `judgments merge` only if
    you choose to) and a summary beside it. Grades are cached by model, prompt version, query and
    document: a rerun asks nothing already graded. Malformed answers are counted and asked again, never
    guessed; a pair still malformed is left ungraded and listed.

    With --sample N, only N pairs are graded (to judgments-llm_MODEL-sample.csv) and written blind to
    POOL_DIR/calibration-sample.csv: a human fills its grade column, `judgments agreement` compares the
    two, and only then is the whole pool paid for.

    Example:

    \b
        beir-harness judge pool/ --llm openai:gpt-4o-mini --endpoint https://api.openai.com/v1
        beir-harness judgments agreement pool/judgments-llm_gpt-4o-mini.csv alice.csv
        beir-harness judge pool/ --llm openai:gpt-4o-mini --sample 100
    """
    from harness.api import judge as run_judge

    report = run_judge(
        pool_dir,
        model,
        endpoint,
        api_key_env=api_key_env,
        concurrency=concurrency,
        endpoint_timeout=endpoint_timeout,
        price_per_1m_tokens=price_per_1m_tokens,
        answer_attempts=answer_attempts,
        cache_dir=cache_dir,
        use_cache=use_cache,
        sample=sample,
        sample_seed=sample_seed,
    )
    click.echo(json.dumps(report.summary(), indent=2) if as_json else report.format_text())
