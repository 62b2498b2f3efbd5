"""The commands on this machine: env, cache list/clear."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.api.settings import third_party_bars


def environment(
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    output_dir: str | Path = "results",
    *,
    bench: bool = False,
    **bench_options: Any,
) -> dict[str, Any]:
    """Versions, the host, torch's devices and the folders in use (the `env` command).

    Args:
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.
        output_dir: The results folder.
        bench: Also encode a sample with each available backend (``env --bench``, about 30 s).
        **bench_options: With `bench`: ``model``, ``texts``, ``dataset``.

    Returns:
        What ``env --json`` prints: ``versions``, ``host``, the folders, and with `bench` ``backends``.
    """
    from harness.pipeline.environment import bench_backends, describe

    info = describe(data_dir, cache_dir, output_dir)
    if bench:
        with third_party_bars(False):
            info["backends"] = bench_backends(cache=cache_dir, **bench_options)
    return info


def cache_entries(cache_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """The cached embeddings (``cache list``).

    Args:
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.

    Returns:
        One dict per entry: ``key``, ``model``, ``dataset``, ``kind``, ``rows``, ``bytes``, ``complete``.
    """
    from harness.io.cache import cache_dir as resolve
    from harness.io.cache import list_entries

    return list_entries(resolve(cache_dir))


def clear_cache(
    cache_dir: str | Path | None = None, *, model: str | None = None, dataset: str | None = None, dry_run: bool = False
) -> list[dict[str, Any]]:
    """Delete cached embeddings, all or those of one model and/or dataset (``cache clear``; it never asks).

    Args:
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.
        model: Only entries of this model (any name `evaluate` accepts).
        dataset: Only entries of this dataset.
        dry_run: Return what would go; delete nothing.

    Returns:
        The entries removed (or, with `dry_run`, that would be).

    Raises:
        HarnessError: A filter that matches nothing (naming the models and datasets that have entries).
    """
    from harness.io.cache import cache_dir as resolve
    from harness.io.cache import clear_entries
    from harness.retrieval.encode import canonical_model_name

    return clear_entries(resolve(cache_dir), canonical_model_name(model) if model else None, dataset, dry_run=dry_run)
