"""NanoBEIR: the 13 official small BEIR subsets (50 queries each over 2–6k documents), downloaded and installed.

Each dataset is three parquet files on Hugging Face (``harness/data/nanobeir.csv``: URL, md5, rows, as
ir_datasets records them). `download` fetches them with the guarantees of BEIR's zips (md5 while streaming,
resume, retries, atomic, a clear offline failure), `import_folder` takes them from a folder for an offline
machine; either way they are converted by `convert`'s parquet reader into a checked BEIR folder
``<data_dir>/nanobeir/<name>/`` whose counts must equal the registry's. NanoBEIR's qrels have no grade
column: every listed pair is relevant, grade 1 — the folder's stamp says so. The files' split is called
``train`` on Hugging Face; it is the evaluation set, written as ``qrels/test.tsv``.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from harness import __version__
from harness.datasets import registry
from harness.datasets.install import STAMP, Installed, data_dir, locked, now, read_stamp
from harness.datasets.registry import NANO_TABLES, NANOBEIR, NanoFile
from harness.errors import ChecksumMismatchError, DatasetError, FormatError, setting
from harness.io.download import RetryPolicy, fetch, md5_file
from harness.io.files import default_permissions, private_dir, remove_stale_temporaries, write_json

logger = logging.getLogger(__name__)

# The columns each table must have (NanoBEIR's own names); others are refused, naming what was found.
COLUMNS = {
    "docs": ({"_id", "text"}, {"title"}),
    "queries": ({"_id", "text"}, set()),
    "qrels": ({"query-id", "corpus-id"}, {"score"}),
}
GRADE_NOTE = "the qrels files have no grade column: every listed (query, document) pair has grade 1"
HF_PREFIX = "https://huggingface.co/datasets/"


def subset_name(name: str) -> str:
    """``nanobeir/scifact`` → ``scifact``, checked against the registry.

    Raises:
        DatasetError: Not one of the 13 (with the closest names).
    """
    import difflib

    subset = name.split("/", 1)[1] if "/" in name else ""
    files = registry.nanobeir_files()
    if subset not in files:
        close = difflib.get_close_matches(subset, list(files), n=3)
        hint = f"did you mean {', '.join(f'{NANOBEIR}/{c}' for c in close)}?" if close else f"known: {', '.join(files)}"
        raise DatasetError(f"{name!r} is not a NanoBEIR dataset ({hint})")
    return subset


def _source(file: NanoFile, base_url: str | None) -> str:
    """The file's URL, or the same path under a mirror (`base_url` replaces ``https://huggingface.co/datasets/``)."""
    if not base_url:
        return file.url
    return base_url.rstrip("/") + "/" + file.url.removeprefix(HF_PREFIX)


def download(
    name: str,
    root: str | Path | None = None,
    base_url: str | None = None,
    policy: RetryPolicy = RetryPolicy(),
    progress: bool = True,
    force: bool = False,
) -> Installed:
    """Download, verify and install ``nanobeir/<name>`` (a no-op when installed).

    Raises:
        DownloadError: Network or server problems (a ``.part`` file is kept for resuming).
        ChecksumMismatchError: A file's md5 differs from the registry's (nothing is kept).
        DatasetError, FormatError: Columns or counts that are not the registry's; nothing is installed.
    """
    subset = subset_name(name)
    root = data_dir(root)
    parts = root / NANOBEIR / f".{subset}.download"  # the verified files, kept until installed (resume)
    root.mkdir(parents=True, exist_ok=True)
    with locked(root, f"{NANOBEIR}-{subset}"):
        target = root / NANOBEIR / subset
        if not force and read_stamp(target) is not None:
            logger.info("%s: already installed at %s", name, target)
            return Installed(f"{NANOBEIR}/{subset}", target, read_stamp(target))
        parts.mkdir(parents=True, exist_ok=True)
        paths, sources = {}, {}
        for table, file in registry.nanobeir_files()[subset].items():
            paths[table], sources[table] = parts / f"{table}.parquet", _source(file, base_url)
            if paths[table].exists() and md5_file(paths[table]) != file.md5:
                paths[table].unlink()  # a stale or foreign file: never trusted
            if not paths[table].exists():
                logger.info("downloading %s %s from %s", name, table, sources[table])
                fetch(sources[table], paths[table], md5=file.md5, policy=policy, progress=progress, kind="parquet file")
        installed = _install(subset, paths, root, {"source": sources})
        shutil.rmtree(parts, ignore_errors=True)
        return installed


def import_folder(source: str | Path, name: str, root: str | Path | None = None, force: bool = False) -> Installed:
    """Install ``nanobeir/<name>`` from a folder holding its three parquet files (any names, any depth: each
    table's file is the one with the registry's md5), for machines without a network.

    Raises:
        DatasetError: A table's file is not in the folder, or the dataset is installed (without `force`).
        FormatError: Columns or counts that are not the registry's.
    """
    subset = subset_name(name)
    source, root = Path(source), data_dir(root)
    if not source.is_dir():
        raise DatasetError(f"{source}: a NanoBEIR import takes the folder holding its three .parquet files")
    by_md5 = {md5_file(path): path for path in sorted(source.rglob("*.parquet"))}
    paths = {}
    for table, file in registry.nanobeir_files()[subset].items():
        if file.md5 not in by_md5:
            raise ChecksumMismatchError(
                f"{source}: no .parquet file with the md5 of {name}'s {table} ({file.md5}, {file.path}); "
                f"download it from {file.url}"
            )
        paths[table] = by_md5[file.md5]
    with locked(root, f"{NANOBEIR}-{subset}"):
        target = root / NANOBEIR / subset
        if read_stamp(target) is not None and not force:
            raise DatasetError(f"{target}: {name} is already installed; pass {setting('force')} to replace it")
        return _install(subset, paths, root, {"source": {t: str(p.resolve()) for t, p in paths.items()}})


def _check_columns(table: str, path: Path) -> None:
    """The file has the table's required columns and no unknown one (its real schema, read from the file)."""
    from harness.datasets.convert import open_table

    with open_table(path) as opened:
        found = set(opened.columns)
    required, optional = COLUMNS[table]
    missing, unknown = required - found, found - required - optional
    if missing or unknown:
        raise FormatError(
            path,
            f"unexpected columns for NanoBEIR {table}: found {', '.join(sorted(found))}; "
            f"expected {', '.join(sorted(required))}"
            + (f" (and optionally {', '.join(sorted(optional))})" if optional else ""),
        )


def _install(subset: str, paths: dict[str, Path], root: Path, stamp: dict[str, Any]) -> Installed:
    """Convert the three files into a staged BEIR folder, check its counts, stamp it, rename it into place."""
    from harness.datasets.convert import ConvertOptions, convert_tables

    spec, files = registry.lookup(f"{NANOBEIR}/{subset}"), registry.nanobeir_files()[subset]
    for table in NANO_TABLES:
        _check_columns(table, paths[table])
    parent = root / NANOBEIR
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(parent, f".{subset}.")
    staging = private_dir(parent, f".{subset}.install")
    try:
        folder = staging / subset
        summary = convert_tables(
            paths["docs"], paths["queries"], paths["qrels"], folder, ConvertOptions(split="test", default_grade=1)
        )
        counts = {"docs": summary.n_docs, "queries": summary.n_queries, "qrels": summary.n_judgments}
        expected = {table: file.rows for table, file in files.items()}
        if counts != expected:
            raise DatasetError(
                f"{NANOBEIR}/{subset}: the files hold {counts['docs']:,} documents, {counts['queries']} "
                f"queries and {counts['qrels']} judgments; the registry expects {expected['docs']:,}, "
                f"{expected['queries']} and {expected['qrels']}; not installed"
            )
        grades = (
            GRADE_NOTE
            if "no grade column" in summary.formats.get(str(paths["qrels"]), "")
            else "graded by the qrels files' score column"
        )
        write_json(
            {
                "name": f"{NANOBEIR}/{subset}",
                **stamp,
                "md5": {t: f.md5 for t, f in files.items()},
                "grades": grades,
                "split": "test (Hugging Face calls it train)",
                "n_docs": counts["docs"],
                "n_queries": counts["queries"],
                "n_judgments": counts["qrels"],
                "self_hits_dropped": spec.ignore_identical_ids,
                "installed_at": now(),
                "harness_version": __version__,
            },
            folder / STAMP,
        )
        default_permissions(folder, folder=True)
        target = parent / subset
        if target.exists():
            shutil.rmtree(target)  # an unstamped leftover (or --force); the lock keeps other processes out
        os.rename(folder, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("%s/%s: installed at %s", NANOBEIR, subset, target)
    return Installed(f"{NANOBEIR}/{subset}", target, read_stamp(target))
