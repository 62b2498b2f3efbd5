"""The commands on datasets: convert, validate (and its coverage of a run), datasets list/download/import/remove."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError, setting

if TYPE_CHECKING:
    from harness.datasets.convert import ConversionSummary
    from harness.datasets.install import Installed
    from harness.datasets.validate import ValidationReport
    from harness.judging.coverage import Coverage

_DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}


def convert(
    out: str | Path,
    corpus: str | Path | None = None,
    queries: str | Path | None = None,
    qrels: str | Path | None = None,
    *,
    eval_set: str | Path | None = None,
    columns: Mapping[str, str] | None = None,
    excluded: str | Path | None = None,
    **options: Any,
) -> ConversionSummary:
    """Convert your own tables (or one eval-set file) into a BEIR folder, checking everything first.

    Args:
        out: The BEIR folder to create.
        corpus: Documents: .csv/.tsv/.jsonl/.json/.parquet, optionally .gz.
        queries: Queries, same formats.
        qrels: Judgments, same formats, or TREC qrels; None: not judged yet (a header-only split, to pool).
        eval_set: Instead of the three tables: one .json/.yaml file with documents and queries.
        excluded: Excluded pairs (query id, document id), same formats: written as ``excluded/<split>.tsv``, removed
            from every ranking of the split before any cut and metric (docs/datasets.md).
        columns: Explicit column names by role (``corpus_id``, ``corpus_text``, ``qrels_score``, ... as
            `harness.datasets.convert.ColumnMap`); the others are detected.
        **options: Any `ConvertOptions` field (``split``, ``force``, ``drop_empty``, ``allow_negative``,
            ``default_grade``, ``delimiter`` — a character or comma/semicolon/tab/pipe —, ``decimal_comma``,
            ``grade_scale`` — ``(0, 3)`` or ``"0-3"`` —, ``sheets`` — ``{"corpus": "Docs"}``, ``"*"`` for any
            table —).

    Returns:
        The `ConversionSummary`: counts, grades, how each file was read.

    Raises:
        HarnessError: Bad tables (every column problem at once, each row problem by line); nothing is written.
    """
    from harness.datasets.convert import ColumnMap, ConvertOptions, convert_eval_set, convert_tables

    known = {spec.name for spec in fields(ConvertOptions)} - {"columns"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; convert takes {', '.join(sorted(known))}")
    roles = {spec.name for spec in fields(ColumnMap)}
    bad_roles = sorted(set(columns or {}) - roles)
    if bad_roles:
        raise HarnessError(f"unknown column role {bad_roles[0]!r}; use {', '.join(sorted(roles))}")
    if options.get("delimiter") in _DELIMITERS:
        options["delimiter"] = _DELIMITERS[options["delimiter"]]
    if isinstance(options.get("grade_scale"), str):
        from harness.datasets.convert import parse_grade_scale

        options["grade_scale"] = parse_grade_scale(options["grade_scale"])
    settings = ConvertOptions(columns=ColumnMap(**(columns or {})), **options)
    if eval_set is not None:
        if corpus or queries or qrels or excluded:
            raise HarnessError("give either eval_set or corpus/queries/qrels, not both")
        return convert_eval_set(eval_set, out, settings)
    if qrels is None and (corpus is None or queries is None):
        raise HarnessError("give corpus and queries (and qrels, unless not judged yet), or eval_set")
    return convert_tables(corpus, queries, qrels, out, settings, excluded=excluded)


def validate(folder: str | Path) -> ValidationReport:
    """Check a BEIR folder line by line and summarise it (the `validate` command).

    Args:
        folder: The BEIR folder (plain or .gz files).

    Returns:
        The `ValidationReport`: ``ok``, the problems (errors, warnings, notes) and counts per split;
        ``format_text()`` and ``to_json()`` are what the command prints.
    """
    from harness.datasets.validate import validate_folder

    return validate_folder(folder)


def coverage(folder: str | Path, run: str | Path, split: str = "test", k: int = 10) -> Coverage:
    """How much of a run's top `k` is judged in a BEIR folder (``validate --run``).

    Args:
        folder: The BEIR folder.
        run: A run file (TREC, MS MARCO or JSON).
        split: The qrels split measured.
        k: The depth measured.

    Returns:
        The `Coverage`: Judged@k and the unjudged top-k pairs (what is left to judge).

    Raises:
        HarnessError: An unreadable run or folder, or an unknown split.
    """
    from harness.judging.coverage import run_coverage

    return run_coverage(folder, split, run, k)


def list_datasets(data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Every BEIR dataset (split, size, counts, installed?, published scores?) and the custom ones installed.

    Args:
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.

    Returns:
        One dict per dataset, as ``datasets list --json`` prints them.
    """
    from harness.datasets.catalog import list_datasets as rows

    return rows(data_dir)


def download_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    base_url: str | None = None,
    force: bool = False,
    progress: bool = False,
) -> Installed:
    """Download, verify (md5, counts) and install a BEIR dataset; resumable (``datasets download``).

    Args:
        name: A registry name (``scifact``, ``cqadupstack``, ``nano-scifact``).
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.
        base_url: A mirror to download ``<base_url>/<name>.zip`` from; default ``$BEIR_HARNESS_MIRROR`` or BEIR's.
        force: Download and install again even when installed.
        progress: A download bar on stderr.

    Returns:
        The `Installed` dataset: its ``name`` and ``path``.

    Raises:
        HarnessError: An unknown or undistributed name, a failed download or checksum (nothing left behind).
    """
    from harness.datasets.catalog import download_dataset as download

    return download(name, data_dir, base_url, progress=progress, force=force)


def import_dataset(
    source: str | Path, data_dir: str | Path | None = None, *, name: str | None = None, force: bool = False
) -> Installed:
    """Install a local BEIR zip or folder, verified, offline (``datasets import``).

    Args:
        source: A BEIR zip or folder.
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.
        name: The dataset's name; default the file or folder name.
        force: Replace an installed dataset of that name.

    Returns:
        The `Installed` dataset; a non-BEIR one becomes a custom dataset usable by its name.

    Raises:
        HarnessError: A zip or folder that fails its checks, or a name already installed without `force`.
    """
    from harness.datasets.catalog import import_dataset as install

    return install(source, data_dir, name, force=force)


def remove_dataset(name: str, data_dir: str | Path | None = None) -> list[Path]:
    """Delete an installed dataset and its download leftovers (``datasets remove``).

    Args:
        name: The installed dataset.
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.

    Returns:
        The paths removed.

    Raises:
        HarnessError: Nothing of that name is installed.
    """
    from harness.datasets.catalog import remove_dataset as remove

    return remove(name, data_dir)
