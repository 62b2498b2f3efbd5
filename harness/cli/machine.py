"""Commands on this machine: the embedding cache, and the environment block (with a backend benchmark)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from harness.cli.options import CACHE_DIR, DATA_DIR, DRY_RUN, JSON, MODEL_NAME, OUTPUT_DIR
from harness.presentation import size_text

logger = logging.getLogger("harness")


@click.group()
def cache() -> None:
    """List, prune or clear the embedding cache.

    Entries are keyed by the model's weights and settings and the corpus content, so a rerun
    of the same model on the same data encodes nothing, and a change never hits a stale entry;
    vectors are also kept by their exact text, so another corpus encodes only the texts the
    cache lacks.

    Example:

    \b
        beir-harness cache list
        beir-harness cache prune --older-than 30d
        beir-harness cache clear --dataset scifact
    """


@cache.command("list")
@CACHE_DIR
@JSON.but(help="Print the entries as JSON.")
def cache_list(cache_dir: Path | None, as_json: bool) -> None:
    """List cached embeddings: model, dataset, kind, rows, size, complete?

    Example:

    \b
        beir-harness cache list
    """
    from harness.api import cache_entries
    from harness.api.machine import cache_root as resolve

    root = resolve(cache_dir)
    entries = cache_entries(root)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    logger.info("cache: %s", root)
    click.echo(_format_entries(entries))
    from harness.api import cache_size

    click.echo(_format_usage(cache_size(root)))


def _format_usage(usage: dict[str, int]) -> str:
    """``disk: 1.2 MiB in all, 1,258,291 bytes (embeddings 410 KiB, texts 819 KiB)``."""
    parts = ", ".join(f"{name} {size_text(size)}" for name, size in usage.items() if name != "total")
    return f"disk: {size_text(usage['total'])} in all, {usage['total']:,} bytes" + (f" ({parts})" if parts else "")


class _Parsed(click.ParamType):
    """A duration (30d, 12h) or a size (10GB, 500MiB): `harness.api.machine.parse_duration`, `.parse_size`."""

    def __init__(self, name: str):
        self.name = name

    def convert(self, value, param, ctx):
        from harness.api import machine

        if not isinstance(value, str):
            return value
        try:
            return getattr(machine, f"parse_{self.name}")(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@cache.command("prune")
@CACHE_DIR
@click.option(
    "--older-than",
    type=_Parsed("duration"),
    default=None,
    help="Remove vectors unused for this long (30d, 12h, 90m, 2w).",
)
@click.option(
    "--max-size",
    type=_Parsed("size"),
    default=None,
    help="Then the least recently used, until the vectors fit (10GB, 500MiB).",
)
@DRY_RUN
def cache_prune(cache_dir: Path | None, older_than: float | None, max_size: int | None, dry_run: bool) -> None:
    """Remove cached vectors by age of last use or to fit a size; safe while another run reads the cache.

    Corpus and query entries and the vectors cached by text go, least recently used first; whatever a
    running evaluation holds stays.

    Example:

    \b
        beir-harness cache prune --older-than 30d
        beir-harness cache prune --max-size 10GB --dry-run
    """
    from harness.api import prune_cache
    from harness.api.machine import cache_root as resolve

    if older_than is None and max_size is None:
        raise click.UsageError("give --older-than and/or --max-size (e.g. cache prune --older-than 30d)")
    root = resolve(cache_dir)
    outcome = prune_cache(root, older_than=older_than, max_size=max_size, dry_run=dry_run)
    freed = size_text(sum(unit["bytes"] for unit in outcome["removed"]))
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {len(outcome['removed'])} item(s) ({freed}) from {root}")
    click.echo(_format_usage(outcome["usage"]))


def _format_entries(entries: list[dict]) -> str:
    from harness.presentation import align

    table = [["key", "kind", "dataset", "rows", "size", "complete", "model"]]
    table += [
        [
            e["key"][:12],
            e["kind"] or "?",
            e["dataset"] or "?",
            f"{e['rows']:,}" if e["rows"] is not None else "-",
            size_text(e["bytes"]),
            "yes" if e["complete"] else "partial",
            e["model"] or "?",
        ]
        for e in entries
    ]
    return "\n".join(align(table, right=[False, False, False, True, True, False, False]))


@cache.command("clear")
@CACHE_DIR
@MODEL_NAME.but(
    default=None,
    show_default=False,
    help="Only entries of this model (any name evaluate accepts, e.g. all-MiniLM-L6-v2).",
)
@click.option("--dataset", default=None, help="Only entries of this dataset.")
@DRY_RUN.but(help="List what would be deleted; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Clear the whole cache without asking.")
def cache_clear(cache_dir: Path | None, model: str | None, dataset: str | None, dry_run: bool, yes: bool) -> None:
    """Delete cached embeddings (all, or those of one model and/or dataset).

    Without a filter every entry goes, so it asks first (--yes skips the question). A filter
    that matches nothing is an error that lists the models and datasets that have entries.

    Example:

    \b
        beir-harness cache clear --dry-run
        beir-harness cache clear --model all-MiniLM-L6-v2 --dataset scifact
        beir-harness cache clear --yes
    """
    from harness.api import clear_cache
    from harness.api.machine import cache_root as resolve

    root = resolve(cache_dir)
    chosen = clear_cache(root, model=model, dataset=dataset, dry_run=True)
    count = f"{len(chosen)} entr{'y' if len(chosen) == 1 else 'ies'} ({size_text(sum(e['bytes'] for e in chosen))})"
    if dry_run:
        click.echo(_format_entries(chosen))
        click.echo(f"would remove {count} from {root}")
        return
    if model is None and dataset is None and chosen and not yes:
        click.confirm(f"remove all {count} from {root}?", abort=True, err=True)
    removed = clear_cache(root, model=model, dataset=dataset)
    freed = size_text(sum(e["bytes"] for e in removed))
    click.echo(f"removed {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} ({freed}) from {root}")


@click.command("env")
@DATA_DIR
@CACHE_DIR
@OUTPUT_DIR.but(help="Results folder.")
@JSON.but(help="Print the block as JSON.")
@click.option(
    "--bench",
    is_flag=True,
    help="Also encode one sample with each available backend (torch fp32 and bf16, onnx, onnx-int8, "
    "openvino, openvino-int8): docs/s here and cosine to torch fp32 (about a minute).",
)
@click.option(
    "--bench-texts",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="With --bench: how many texts to encode.",
)
@click.option(
    "--bench-dataset",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="With --bench: take the texts from this BEIR folder [default: the bundled demo corpus].",
)
@MODEL_NAME.but(default=None, show_default=False, help="With --bench: the model [default: the default model].")
def env(
    data_dir: Path | None,
    cache_dir: Path | None,
    output_dir: Path,
    as_json: bool,
    bench: bool,
    bench_texts: int,
    bench_dataset: Path | None,
    model: str | None,
) -> None:
    """Print versions, the host, torch's devices and the folders in use (for bug reports).

    Shows python, beir-harness, torch, sentence-transformers, transformers, faiss, pytrec_eval
    and numpy versions; the CPU and the instruction sets that pick kernels; CUDA devices and
    MPS; the data, cache and results folders actually used, installed datasets and cache size.
    With --bench, measures every backend on this machine: which is fastest here, and how far
    its vectors are from torch fp32's; and the matrix-multiply rate in fp32, bf16 and int8
    (those the CPU has), at a search's shape.

    Example:

    \b
        beir-harness env
        beir-harness env --json
        beir-harness env --bench
        beir-harness env --bench --bench-dataset ./my-eval-set --bench-texts 300
    """
    from harness.api import environment
    from harness.api.machine import format_bench, format_environment, format_gemm

    info = environment(
        data_dir,
        cache_dir,
        output_dir,
        bench=bench,
        **({"model": model, "texts": bench_texts, "dataset": bench_dataset} if bench else {}),
    )
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(format_environment(info))
    if bench:
        click.echo("")
        click.echo(format_bench(info["backends"], info["host"], bench_texts))
        click.echo("")
        click.echo(format_gemm(info["gemm"]))
