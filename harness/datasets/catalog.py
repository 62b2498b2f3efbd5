"""BEIR datasets on disk: download, import, verify, list and remove them.

Layout: ``<data_dir>/<name>/`` holds a BEIR folder plus a stamp file ``.beir-harness.json``
(name, md5, source, date, counts). A folder counts as installed only with its stamp; the stamp is
written last, after the folder was extracted into a temporary sibling, checked against the
registry and renamed into place. So an interrupted download or extraction never leaves a folder
that looks complete, and the next run resumes the ``.part`` file or starts over by itself.

The data dir is ``--data-dir``, else ``$BEIR_HARNESS_DATA_DIR``, else ``./datasets``. The base URL
is ``--base-url``, else ``$BEIR_HARNESS_MIRROR``, else BEIR's server. Work on one dataset holds
an exclusive lock (``<data_dir>/.locks/<name>.lock``), so two processes downloading the same
dataset take turns: the second finds it installed.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from harness import __version__
from harness.datasets import registry
from harness.datasets.install import STAMP, Installed, base_url, data_dir, data_root, locked, now, read_stamp
from harness.datasets.published import counts_by_dataset
from harness.datasets.registry import DatasetSpec
from harness.errors import ChecksumMismatchError, DatasetError, setting
from harness.io.download import RetryPolicy, fetch, md5_file, safe_extract
from harness.io.files import default_permissions, private_dir, remove_stale_temporaries, write_json

logger = logging.getLogger(__name__)

# Text compresses 3-5x in BEIR's archives; anything far beyond is refused as a zip bomb.
MAX_EXPANSION = 25
MIN_EXTRACT_LIMIT = 64 * 2**20


def _safe_name(name: str) -> str:
    """A dataset name usable as one folder name under the data dir."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\x00") or name.startswith("."):
        raise DatasetError(f"{name!r} is not a valid dataset name (one folder name: letters, digits, - and _)")
    return name


def _public_spec(name: str) -> DatasetSpec:
    spec = registry.get(name)
    if not spec.public:
        raise DatasetError(
            f"{name} is not distributed by BEIR: build it from its licensed source, then make a BEIR folder "
            f"with `beir-harness convert` and evaluate that folder"
        )
    return spec


def _count_lines(path: Path) -> int:
    import gzip

    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def _check_counts(
    folder: Path, spec: DatasetSpec, what: str = "the archive", hint: str = "not installed"
) -> dict[str, int]:
    """Compare docs and eval-split judged queries with the registry; CQADupStack sums its forums."""
    from harness.io.formats import find_file
    from harness.io.trec import iter_qrels

    parts = [folder / forum for forum in spec.subsets] if spec.subsets else [folder]
    n_docs = n_queries = 0
    for part in parts:
        corpus, qrels = find_file(part / "corpus.jsonl"), find_file(part / "qrels" / f"{spec.eval_split}.tsv")
        if corpus is None or qrels is None:
            raise DatasetError(
                f"{part}: {what} lacks corpus.jsonl or qrels/{spec.eval_split}.tsv, so it cannot be {spec.name}; {hint}"
            )
        n_docs += _count_lines(corpus)
        n_queries += len({query_id for _, query_id, _, _ in iter_qrels(qrels)})
    if (n_docs, n_queries) != (spec.n_docs, spec.n_queries):
        raise DatasetError(
            f"{spec.name}: {what} has {n_docs:,} documents and {n_queries:,} judged {spec.eval_split} queries, "
            f"the registry expects {spec.n_docs:,} and {spec.n_queries:,}; {hint}"
        )
    return {"n_docs": n_docs, "n_queries": n_queries}


def _beir_root(extracted: Path, name: str) -> Path:
    """BEIR's archives hold one top folder (``nfcorpus/...``); accept a flat archive too."""
    entries = [p for p in extracted.iterdir() if not p.name.startswith(("__MACOSX", "."))]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return extracted


def _install_archive(archive: Path, root: Path, name: str, spec: DatasetSpec | None, stamp: dict[str, Any]) -> Path:
    """Extract into a temporary sibling, check, stamp, and rename into ``root/name``."""
    target = root / name
    limit = max(MIN_EXTRACT_LIMIT, MAX_EXPANSION * archive.stat().st_size)
    remove_stale_temporaries(root, f".{name}.")  # an interrupted run's staging folder
    staging = private_dir(root, f".{name}.extract")
    try:
        safe_extract(archive, staging / "x", max_bytes=limit)
        folder = _beir_root(staging / "x", name)
        if spec is not None:
            stamp.update(_check_counts(folder, spec))
        else:
            stamp.update(_require_valid(folder))
        write_json({"name": name, **stamp, "installed_at": now(), "harness_version": __version__}, folder / STAMP)
        default_permissions(folder, folder=True)
        if target.exists():
            shutil.rmtree(target)  # an unstamped leftover; the lock keeps other processes out
        os.rename(folder, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _require_valid(folder: Path) -> dict[str, Any]:
    """Validate a folder; returns its counts for the stamp (documents, queries, judged queries per split), which
    `custom_datasets` lists."""
    from harness.datasets.validate import validate_folder

    report = validate_folder(folder)
    if not report.ok:
        first = next(p for p in report.problems if p.severity == "error")
        raise DatasetError(
            f"{folder}: not a valid BEIR folder ({report.count('error')} error(s), first: {first}); "
            "run `beir-harness validate` on it for the list"
        )
    return {
        "n_docs": report.n_docs,
        "n_queries_file": report.n_queries,
        "splits": {summary.split: summary.judged_queries for summary in report.splits},
    }


def download_dataset(
    name: str,
    root: str | Path | None = None,
    url: str | None = None,
    policy: RetryPolicy = RetryPolicy(),
    progress: bool = True,
    force: bool = False,
) -> Installed:
    """Download, verify and install one BEIR dataset (a no-op when already installed).

    Args:
        name: A registry name.
        root: The data dir (see `data_dir`).
        url: The base URL (see `base_url`); the archive is ``<base>/<name>.zip``.
        policy: Retries and timeouts.
        progress: Progress bar on stderr.
        force: Download and install again even when installed.

    Raises:
        DatasetError: Unknown or non-distributed name, counts that disagree with the registry.
        DownloadError: Network or server problems (a ``.part`` file is kept for resuming).
        ChecksumMismatchError: Wrong md5 (nothing is kept).
    """
    if name == registry.NANOBEIR or name.startswith(registry.NANOBEIR + "/"):
        return _download_nanobeir(name, root, url, policy, progress, force)
    spec = _public_spec(_safe_name(name))
    root = data_dir(root)
    with data_root(root), locked(root, name):
        target = root / name
        if not force and read_stamp(target) is not None:
            logger.info("%s: already installed at %s", name, target)
            return Installed(name, target, read_stamp(target))
        source = base_url(url) + f"{name}.zip"
        archive = root / f"{name}.zip"
        if archive.exists() and md5_file(archive) != spec.md5:
            archive.unlink()  # a stale or foreign archive: never trusted
        if not archive.exists():
            logger.info("downloading %s (%s MB) from %s", name, spec.zip_mb, source)
            fetch(source, archive, md5=spec.md5, expected_size=spec.zip_bytes, policy=policy, progress=progress)
        path = _install_archive(archive, root, name, spec, {"md5": spec.md5, "source": source})
        archive.unlink()
        logger.info("%s: installed at %s", name, path)
        return Installed(name, path, read_stamp(path))


def _download_nanobeir(name: str, root, url, policy: RetryPolicy, progress: bool, force: bool) -> Installed:
    """``nanobeir/<name>``, or ``nanobeir``: all 13 (`harness.datasets.nanobeir`)."""
    from harness.datasets import nanobeir

    if name != registry.NANOBEIR:
        return nanobeir.download(name, root, url, policy, progress, force)
    for subset in registry.lookup(registry.NANOBEIR).subsets:
        nanobeir.download(f"{registry.NANOBEIR}/{subset}", root, url, policy, progress, force)
    return Installed(registry.NANOBEIR, data_dir(root) / registry.NANOBEIR, {"datasets": 13})


def import_dataset(
    source: str | Path, root: str | Path | None = None, name: str | None = None, force: bool = False
) -> Installed:
    """Install a local BEIR zip or folder into the data dir, verified.

    A zip named like a registry dataset (``nfcorpus.zip``) must have the registry's md5 and
    counts, and a folder imported under a registry name the registry's counts; any other zip or folder
    must pass `validate` and becomes a custom dataset, usable by its name (`resolve_dataset`) and listed by
    `list_datasets`.

    Args:
        source: A ``.zip`` archive or a BEIR folder.
        root: The data dir.
        name: The dataset name; default the file or folder name.
        force: Replace an installed dataset of that name.

    Raises:
        ChecksumMismatchError: A known dataset's archive with the wrong md5.
        DatasetError: Missing source, invalid folder, a folder under a registry name with other counts than the
            registry's, an installed dataset without ``force``.
    """
    source = Path(source)
    if not source.exists():
        raise DatasetError(f"{source}: no such file or folder")
    if name is not None and name.startswith(registry.NANOBEIR + "/"):
        from harness.datasets import nanobeir

        return nanobeir.import_folder(source, name, root, force)
    named = name is not None
    name = _safe_name(name or source.name.removesuffix(".zip"))
    root = data_dir(root)
    spec = registry.lookup(name)
    with data_root(root), locked(root, name):
        target = root / name
        if read_stamp(target) is not None and not force:
            raise DatasetError(f"{target}: {name} is already installed; pass {setting('force')} to replace it")
        stamp: dict[str, Any] = {"source": str(source.resolve()), "custom": spec is None}
        if source.is_file():
            md5 = md5_file(source)
            if spec is not None and spec.md5 and md5 != spec.md5:
                hint = "give it another name" if named else f"pass {setting('name')} to import it under another name"
                raise ChecksumMismatchError(
                    f"{source}: md5 {md5} is not {name}'s {spec.md5}; not the BEIR archive ({hint})"
                )
            stamp["md5"] = md5
            path = _install_archive(source, root, name, spec if spec is not None and spec.md5 else None, stamp)
        else:
            path = _install_folder(source, root, name, stamp, spec)
    return Installed(name, path, read_stamp(path))


def _install_folder(source: Path, root: Path, name: str, stamp: dict[str, Any], spec: DatasetSpec | None) -> Path:
    """Copy a valid folder in; under a registry name it must have the registry's counts, else it is custom."""
    counts = _require_valid(source)
    if spec is not None:
        stamp.update(
            _check_counts(
                source,
                spec,
                "the folder",
                f"not {name}: import it under another name "
                f"({setting('name')} {name}-custom), which makes it a custom dataset",
            )
        )
    else:
        stamp.update(counts)
    remove_stale_temporaries(root, f".{name}.")
    staging = private_dir(root, f".{name}.import")
    try:
        folder = staging / name
        shutil.copytree(source, folder, symlinks=False)
        write_json({"name": name, **stamp, "installed_at": now(), "harness_version": __version__}, folder / STAMP)
        target = root / name
        if target.exists():
            shutil.rmtree(target)
        os.rename(folder, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def remove_dataset(name: str, root: str | Path | None = None) -> list[Path]:
    """Delete an installed dataset and any leftovers (archive, part file, temporary folders).

    Returns:
        The paths removed.

    Raises:
        DatasetError: Nothing of that name is in the data dir.
    """
    root = data_dir(root)
    name = _safe_name(name)
    candidates = [root / name, root / f"{name}.zip", root / f"{name}.zip.part"]
    candidates += sorted(root.glob(f".{name}.extract.*")) + sorted(root.glob(f".{name}.import.*"))
    removed = []
    with locked(root, name):
        for path in candidates:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
            else:
                continue
            removed.append(path)
    if not removed:
        raise DatasetError(f"{name}: nothing to remove in {root}")
    return removed


def list_datasets(root: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per registry dataset, with whether it is installed in the data dir."""
    root = data_dir(root)
    rows = []
    nano = [spec for spec in registry.nanobeir().values() if not spec.subsets]
    for spec in [*registry.datasets().values(), *nano]:
        rows.append(
            {
                "name": spec.name,
                "family": spec.family,
                "split": spec.eval_split,
                "docs": spec.n_docs,
                "queries": spec.n_queries,
                "zip_mb": spec.zip_mb,
                "public": spec.public,
                "installed": read_stamp(root / spec.name) is not None,  # nanobeir/<name> is its own folder too
                "published_scores": counts_by_dataset().get(spec.name, 0),
                "ignore_identical_ids": spec.ignore_identical_ids,
            }
        )
    return rows + custom_datasets(root)


def custom_datasets(root: str | Path | None = None) -> list[dict[str, Any]]:
    """One row (as `list_datasets`') per installed dataset whose name the registry does not know: a team's own
    eval set imported with `import_dataset`, usable by its name like a registry dataset."""
    root = data_dir(root)
    rows = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        stamp = read_stamp(folder) if folder.is_dir() and not folder.name.startswith(".") else None
        if stamp is None or registry.lookup(folder.name) is not None or folder.name == registry.NANOBEIR:
            continue
        splits = stamp.get("splits") or {}
        split = "test" if "test" in splits else next(iter(splits), "")
        rows.append(
            {
                "name": folder.name,
                "family": "custom",
                "split": split,
                "docs": stamp.get("n_docs"),
                "queries": splits.get(split),
                "zip_mb": None,
                "public": False,
                "installed": True,
                "published_scores": 0,
                "ignore_identical_ids": False,
            }
        )
    return rows


def _siblings(path: Path) -> str:
    """``; did you mean ...?`` with the folders beside a mistyped path, or ""."""
    import difflib

    try:
        names = [entry.name for entry in path.parent.iterdir() if entry.is_dir()]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(str(path.parent / name) for name in close)}?" if close else ""


def _safe_custom(name: str, root: str | Path | None) -> Path | None:
    """The installed (stamped) folder of a custom dataset called `name`, or None."""
    try:
        folder = data_dir(root) / _safe_name(name)
    except DatasetError:
        return None
    return folder if read_stamp(folder) is not None else None


def resolve_dataset(
    argument: str | Path,
    root: str | Path | None = None,
    download: bool = True,
    url: str | None = None,
    progress: bool = True,
) -> tuple[Path, str]:
    """Turn `evaluate`'s DATASET argument into (folder, dataset name).

    An existing folder is used as it is (its name is the folder name). Otherwise a registry name
    (or ``cqadupstack/<forum>``, or MTEB's task name: ``FiQA2018``, ``CQADupstackGisRetrieval``) resolves
    to the data dir, downloading it when missing unless
    `download` is False; a name the registry does not know resolves to a custom dataset installed under
    that name (`import_dataset`).

    Raises:
        DatasetError: Neither a folder nor a known name; not installed with `download` off.
    """
    folder, name, missing = locate_dataset(argument, root, download)
    if missing is not None:
        download_dataset(missing, data_dir(root), url, progress=progress)
    return folder, name


def locate_dataset(
    argument: str | Path, root: str | Path | None = None, download: bool = True
) -> tuple[Path, str, str | None]:
    """Where `resolve_dataset` finds `argument`, with every check it makes and nothing downloaded: (folder, dataset
    name, the registry name to download first or None), so a grid can check all its datasets before the first runs.

    Raises:
        DatasetError: Neither a folder nor a known name; a name BEIR does not distribute and not installed; not
            installed with `download` off.
    """
    path = Path(argument)
    if path.is_dir():
        return path, path.resolve().name, None
    argument = registry.from_mteb_task(str(argument)) or str(argument)  # MTEB's names work too (FiQA2018)
    name, _, subset = argument.partition("/")
    spec = registry.lookup(name)
    if spec is None and not subset and _safe_custom(name, root) is not None:
        return _safe_custom(name, root), name, None  # a custom dataset imported under this name
    if spec is None:
        if path.is_file():
            raise DatasetError(f"{argument} is a file; pass the BEIR folder that holds it ({path.parent})")
        if "/" in str(argument) or "\\" in str(argument) or str(argument).startswith("."):
            raise DatasetError(f"{argument}: no such dataset folder{_siblings(path)}")
        raise DatasetError(
            f"{argument}: no such dataset folder, and not a BEIR dataset name ({registry.suggest(name)})"
        )
    what = "datasets" if spec.family == "NanoBEIR" else "forums"
    if spec.subsets and subset not in spec.subsets:
        raise DatasetError(
            f"{name} is {len(spec.subsets)} separate {what}; evaluate one, e.g. "
            f"{name}/{spec.subsets[0]}, or all of them with `beir-harness bench --datasets {name}`, "
            f"which also reports their mean ({what}: {', '.join(spec.subsets)})"
        )
    if subset and not spec.subsets:
        raise DatasetError(f"{name} has no sub-corpora; use {name}")
    root = data_dir(root)
    if spec.family == "NanoBEIR":  # each of the 13 is installed (and stamped) on its own
        if read_stamp(root / name / subset) is not None:
            return root / name / subset, str(argument), None
        if not download:
            raise DatasetError(
                f"{argument} is not installed in {root}; run `beir-harness datasets download "
                f"{argument}` or drop --no-download"
            )
        return root / name / subset, str(argument), str(argument)
    folder = root / name / subset if subset else root / name
    if read_stamp(root / name) is not None:
        return folder, str(argument), None
    if not download:
        raise DatasetError(
            f"{name} is not installed in {root}; run `beir-harness datasets download {name}` or drop --no-download"
        )
    _public_spec(name)  # one BEIR does not distribute cannot be downloaded
    return folder, str(argument), name
