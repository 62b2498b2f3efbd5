"""The commands on this machine: env, cache list/size/prune/clear."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.api.settings import third_party_bars
from harness.io.cache.upkeep import parse_duration
from harness.pipeline.environment import format_bench, format_environment, format_gemm  # noqa: F401 - the command line's
from harness.presentation import parse_size


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
        bench: Also encode a sample with each available backend (``env --bench``, about 30 s), and measure this
            host's matrix-multiply rate in each precision its CPU has (`harness.host.gemm_probe`, about 2 s).
        **bench_options: With `bench`: ``model``, ``texts``, ``dataset``.

    Returns:
        What ``env --json`` prints: ``versions``, ``host``, the folders, and with `bench` ``backends`` and
        ``gemm``.
    """
    from harness.pipeline.environment import bench_backends, describe

    info = describe(data_dir, cache_dir, output_dir)
    if bench:
        with third_party_bars(False):
            info["backends"] = bench_backends(cache=cache_dir, **bench_options)
        from harness.host import gemm_probe, gemm_share

        info["gemm"] = gemm_probe()
        gemm_share(info["backends"], info["gemm"])  # each backend's share of the rate in its products' precision
    return info


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The cache folder in use: `cache_dir`, else ``$BEIR_HARNESS_CACHE_DIR``, else the user cache folder
    (``~/.cache/beir-harness`` on Linux)."""
    from harness.io.cache import cache_dir as resolve

    return resolve(cache_dir)


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


def cache_size(cache_dir: str | Path | None = None) -> dict[str, int]:
    """The cache's size on disk (``cache list`` prints it).

    Args:
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.

    Returns:
        Bytes per top-level folder (``embeddings``, ``texts``, ``models``, ``indexes``, ...) and ``total``.
    """
    from harness.io.cache import cache_dir as resolve
    from harness.io.cache.upkeep import cache_usage

    return cache_usage(resolve(cache_dir))


def prune_cache(
    cache_dir: str | Path | None = None,
    *,
    older_than: str | float | None = None,
    max_size: str | int | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Remove cached vectors unused for `older_than`, then the least recently used until `max_size` (``cache
    prune``); whatever a running evaluation reads stays.

    Args:
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.
        older_than: Seconds, or a duration such as ``30d``, ``12h``.
        max_size: Bytes, or a size such as ``10GB``, ``500MiB``: the most ``embeddings/`` and ``texts/`` keep.
        dry_run: Return what would go; delete nothing.

    Returns:
        ``removed`` (kind, path, bytes, last use of each) and ``usage`` (bytes per cache folder, after).
    """
    from harness.io.cache import cache_dir as resolve
    from harness.io.cache.upkeep import cache_usage
    from harness.io.cache.upkeep import prune_cache as prune

    root = resolve(cache_dir)
    seconds = parse_duration(older_than) if isinstance(older_than, str) else older_than
    size = parse_size(max_size) if isinstance(max_size, str) else max_size
    removed = prune(root, seconds, size, dry_run=dry_run)
    return {"removed": removed, "usage": cache_usage(root)}


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
