"""Results: where the record of one evaluation (`harness.records.Result`, re-exported here) is written, and how it
is shown.

One evaluation is written to ``<output_dir>/<dataset>/<model-slug>/<split>.json`` for the
default configuration, or ``<split>.<variant>.json`` for any other (`harness.reporting.variant`), and its
scored run beside it with ``.run.trec`` in place of ``.json`` (the exact run the metrics were
computed on, so ``trec_eval -c -m ndcg_cut.10 qrels <split>.run.trec`` gives the same numbers).
Both files are written atomically; the run first, so a result file never points at a missing
run. A rerun of one configuration replaces its own files; a file of another configuration found
at the same path (written by an older release) is kept under another name, never overwritten.

A result file records the sha256 of its own content (``fingerprints["content"]``, `harness.records.result_digest`)
and of its run file (``fingerprints["scored_run"]``). Every reader checks what it reads with `result_problems`
(the digest, ``n_queries``, each mean against its per-query values, and the run file when it reads it), so a number
edited by hand is refused, never shown (`check_results`).
"""

from __future__ import annotations

import csv
import hashlib
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import DataMismatchError, HarnessError, OutputError, setting
from harness.io.files import atomic_writer, remove_stale_temporaries, write_json
from harness.io.lines import content_sha256
from harness.io.trec import write_run
from harness.presentation import align, metric_text
from harness.records import (
    CONTENT_DIGEST,
    RESULT_SCHEMA_VERSION,  # noqa: F401 - re-exported: results are read and written here
    Result,
    Run,
    model_slug,
    result_digest,
)

logger = logging.getLogger(__name__)


RESULTS_CSV_COLUMNS = (
    "dataset",
    "split",
    "model",
    "label",
    "variant",
    "metric",
    "value",
    "n_queries",
    "ignore_identical_ids",
    "index",
    "config_hash",
    "harness_version",
    "created",
)


def read_result(path: str | Path) -> Result | None:
    """The result at `path`, or None when there is none (missing, unreadable or not a result file)."""
    try:
        return Result.from_json(path)
    except HarnessError:
        return None


def load_results(paths: Iterable[str | Path], allow_mixed_data: bool = False) -> list[Result]:
    """Every result JSON in `paths` (files, or folders searched recursively), checked (`check_results`) and
    checked to share their data.

    Args:
        paths: Result files or folders.
        allow_mixed_data: Results of one dataset computed on different data are shown as datasets of their own
            (``scifact [data 1a2b3c4d]``) instead of refused (`check_same_data`).

    Raises:
        HarnessError: A path does not exist, nothing readable was found, or a result fails `result_problems`.
        DataMismatchError: Results of one dataset name computed on different corpus, queries or qrels.
    """
    results = []
    for path in map(Path, paths):
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = sorted(p for p in path.rglob("*.json") if not p.name.startswith("."))
        else:
            raise HarnessError(f"{path}: no such file or folder")
        for candidate in candidates:
            if path.is_file():
                results.append(Result.from_json(candidate))  # a file named on purpose: say why it is not a result
                continue
            try:
                results.append(Result.from_json(candidate))
            except HarnessError:
                continue  # other JSON in a results folder (a plot's data, notes) is not a result
    if not results:
        raise HarnessError(f"no result files found in {', '.join(map(str, paths))} (run `beir-harness evaluate` first)")
    check_results(results)
    return check_same_data(results, allow_mixed_data)


# Relative tolerance of a stored mean against the mean of its per-query values (both are one `math.fsum` apart).
MEAN_TOLERANCE = 1e-9


def result_problems(result: Result, run_file: bool = False) -> list[str]:
    """What differs in a result read from a file from what its writer wrote: one line per problem, naming the file.

    Checked: the content digest the file records (``fingerprints["content"]``, `harness.records.result_digest`)
    against the file as read; ``n_queries`` against its per-query values (`harness.evaluation.metrics.evaluate`
    writes one row per judged query); each mean in ``metrics`` against the sum of its per-query values over the
    ``n_queries`` judged queries (relative tolerance `MEAN_TOLERANCE`; a judged query the run missed has its row
    of zeros); with `run_file`, the run file beside it against the ``scored_run`` sha256 it records (when both
    exist: a missing run file is its reader's to report). A result written before content digests is checked
    for all but its digest.

    Returns:
        ``[]`` for a result that passes, else lines such as ``results/scifact/bm25/test.json: nDCG@10 is 0.9999
        but its per-query values average 0.7226 (edited by hand?)``.
    """
    return [f"{result.where}: {what}" for what in _differences(result, run_file)]


def check_results(results: Iterable[Result], run_file: bool = False, note: bool = True) -> None:
    """Refuse results that fail `result_problems`; with `note`, log one line for those written before content
    digests (`note_undigested`: a reader that checks again what `load_results` read, for its run file, passes False).

    Raises:
        HarnessError: One line: the first failing file, everything that differs in it, and how many more fail.
    """
    results = list(results)
    failing = [(result, what) for result in results if (what := _differences(result, run_file))]
    if failing:
        (first, what), more = failing[0], len(failing) - 1
        others = f" ({more} more failing, the first {failing[1][0].where})" if more else ""
        raise HarnessError(
            f"{first.where}: {'; '.join(what)}; rerun that evaluation, or restore the file as it was written{others}"
        )
    if note:
        note_undigested(results)


def note_undigested(results: Iterable[Result]) -> None:
    """Log one line for the results written before content digests (naming the first), whose means were checked."""
    old = [result for result in results if CONTENT_DIGEST not in result.fingerprints]
    if old:
        version = old[0].versions.get("beir-harness") or "an early release"
        more = f" and {len(old) - 1} other result{'s' * (len(old) > 2)}" if len(old) > 1 else ""
        whose = "their" if more else "its"
        logger.warning(
            "%s%s: written before results recorded a digest of their content (by beir-harness %s); %s means were "
            "checked against %s per-query values, the rest cannot be checked",
            old[0].where,
            more,
            version,
            whose,
            whose,
        )


def _differences(result: Result, run_file: bool) -> list[str]:
    found = _mean_differences(result)
    recorded = result.fingerprints.get(CONTENT_DIGEST)
    if recorded is not None and recorded != result.read_digest:
        found.append("its content digest does not match (the file was changed after it was written)")
    run_sha256 = result.fingerprints.get("scored_run")
    if run_file and run_sha256 and result.path is not None and result.run_path.is_file():
        if content_sha256(result.run_path) != run_sha256:
            found.append(
                f"its run file {result.run_path.name} was altered after {result.path.name} was written (its "
                "sha256 differs from the one recorded)"
            )
    return found


def _mean_differences(result: Result) -> list[str]:
    """``n_queries`` against the per-query rows, and each mean against the mean of its column over ``n_queries``."""
    n, rows = result.n_queries, result.per_query
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 0 and isinstance(rows, dict)) or not isinstance(
        result.metrics, dict
    ):
        return [f"n_queries ({n!r}), metrics or per_query is not what a result holds (edited by hand?)"]
    found = [f"n_queries is {n} but it holds per-query values of {len(rows)} queries"] if n != len(rows) else []
    wrong = []
    for metric, mean in result.metrics.items():
        column = [row.get(metric) if isinstance(row, dict) else None for row in rows.values()]
        unusable = sum(1 for value in column if not _is_number(value))
        if unusable or not _is_number(mean):
            found.append(f"{metric}: its mean or the per-query values of {unusable} queries are missing or not numbers")
            continue
        expected = math.fsum(column) / n if n else 0.0
        both_nan = math.isnan(mean) and math.isnan(expected)
        if not (both_nan or math.isclose(mean, expected, rel_tol=MEAN_TOLERANCE, abs_tol=1e-12)):
            wrong.append((metric, mean, expected))
    if wrong:
        metric, mean, expected = wrong[0]
        stored, average = _apart(mean, expected)
        more = f" (and {len(wrong) - 1} more means differ from theirs)" if len(wrong) > 1 else ""
        found.append(f"{metric} is {stored} but its per-query values average {average} (edited by hand?){more}")
    return found


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _apart(a: float, b: float) -> tuple[str, str]:
    """Two values with just enough decimals to tell them apart (4 at least)."""
    for digits in (4, 6, 9, 12):
        shown = format(a, f".{digits}f"), format(b, f".{digits}f")
        if shown[0] != shown[1]:
            return shown
    return repr(a), repr(b)


def results_rows(output_dir: str | Path) -> list[dict[str, Any]]:
    """Long-form rows (one per dataset × model × split × metric) of every result under `output_dir`; a result that
    fails `result_problems` is left out with a warning naming it and what differs."""
    rows = []
    kept = []
    for path in sorted(Path(output_dir).glob("*/*/*.json")):  # one file per configuration
        result = read_result(path)
        if result is None:
            continue
        what = _differences(result, run_file=False)
        if what:
            logger.warning("%s: %s; left out of results.csv", path, "; ".join(what))
            continue
        kept.append(result)
        for metric, value in result.metrics.items():
            rows.append(
                {
                    "dataset": result.dataset,
                    "split": result.split,
                    "model": result.model,
                    "label": result.label,
                    "variant": result.variant,
                    "metric": metric,
                    "value": value,
                    "n_queries": result.n_queries,
                    "ignore_identical_ids": result.config.get("ignore_identical_ids"),
                    "index": result.config.get("index", ""),
                    "config_hash": result.config_hash,
                    "harness_version": result.versions.get("beir-harness", ""),
                    "created": result.created,
                }
            )
    note_undigested(kept)
    return rows


# The files a result's numbers depend on; the queries and corpus are shared by a dataset's splits.
DATA_FILES = ("corpus", "queries", "qrels")


EXCLUDED = "excluded"  # the split's excluded pairs: a fingerprint only where the folder has them


def data_changes(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """The data files (of `DATA_FILES`) whose fingerprints differ; a file either side does not record is not
    compared (results written before fingerprints existed). The excluded pairs (``excluded``) differ also when one
    side has them and the other none (both sides recording qrels)."""
    changed = [
        name for name in DATA_FILES if recorded.get(name) and current.get(name) and recorded[name] != current[name]
    ]
    both = recorded.get("qrels") and current.get("qrels")
    if both and recorded.get(EXCLUDED, "") != current.get(EXCLUDED, ""):
        changed.append(EXCLUDED)
    return changed


def data_tag(result: Result) -> str:
    """Eight hex digits naming the data a result was computed on (its corpus, queries and qrels fingerprints)."""
    joined = "\n".join(result.fingerprints.get(name, "") for name in DATA_FILES)
    joined += f"\n{result.fingerprints[EXCLUDED]}" if result.fingerprints.get(EXCLUDED) else ""
    return hashlib.sha256(joined.encode()).hexdigest()[:8]


def folder_fingerprints(folder) -> dict[str, str]:
    """sha256 of a BEIR folder's corpus, queries and split qrels as they are now (`BeirFolder`), as an
    evaluation records them; each file is hashed once per process while its size and mtime stay the same."""
    found = {name: _file_sha256(Path(getattr(folder, name))) for name in DATA_FILES}
    excluded = getattr(folder, EXCLUDED, None)
    return {**found, EXCLUDED: _file_sha256(Path(excluded))} if excluded else found


_SHA256_MEMO: dict[tuple, str] = {}


def _file_sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _SHA256_MEMO:
        _SHA256_MEMO[key] = content_sha256(path)
    return _SHA256_MEMO[key]


def check_same_data(results: list[Result], allow_mixed: bool = False) -> list[Result]:
    """Refuse results of one dataset name computed on different data, or (`allow_mixed`) label them apart.

    Results of one dataset must share corpus and queries fingerprints, and those of one dataset and split
    their qrels. With `allow_mixed`, every version of a dataset's data becomes its own dataset,
    ``scifact [data 1a2b3c4d]`` (`data_tag`), so no table, average or significance test mixes them.

    Raises:
        DataMismatchError: Two results of one dataset differ in their data, naming both files, the file
            that differs, and which of them matches the dataset folder as it is now.
    """
    clashes = _data_clashes(results)
    if not clashes:
        return list(results)
    if not allow_mixed:
        first, other, changed = clashes[0]
        raise DataMismatchError(
            f"results of {first.dataset} were computed on different data: {first.where} and {other.where} differ "
            f"in {' and '.join(changed)} ({_short(first, changed[0])} vs {_short(other, changed[0])})"
            f"{_which_is_current(first, other)}; rerun the stale one (bench reruns a cell whose data changed); "
            f"report {setting('allow_mixed_data')} shows each version of the data as a dataset of its own"
        )
    mixed = {result.dataset for clash in clashes for result in clash[:2]}
    return [
        replace(result, dataset=f"{result.dataset} [data {data_tag(result)}]") if result.dataset in mixed else result
        for result in results
    ]


def _data_clashes(results: list[Result]) -> list[tuple[Result, Result, list[str]]]:
    """(a result, another of its dataset, the files that differ) for each result unlike the first of its dataset."""
    first_of: dict[str, Result] = {}
    first_of_split: dict[tuple[str, str], Result] = {}
    clashes = []
    for result in results:
        base = first_of.setdefault(result.dataset, result)
        split_base = first_of_split.setdefault((result.dataset, result.split), result)
        per_split = ("qrels", EXCLUDED)  # the split's own files
        changed = [name for name in data_changes(base.fingerprints, result.fingerprints) if name not in per_split]
        changed += [name for name in data_changes(split_base.fingerprints, result.fingerprints) if name in per_split]
        if changed:
            clashes.append((split_base if set(changed) <= set(per_split) else base, result, changed))
    return clashes


def _short(result: Result, name: str) -> str:
    recorded = result.fingerprints.get(name)
    return f"sha256 {recorded[:8]}…" if recorded else "none"


def _which_is_current(first: Result, other: Result) -> str:
    """``; the folder as it is now matches X`` when the dataset folder can still be read, else ""."""
    from harness.io.formats import locate_beir_folder

    try:
        current = folder_fingerprints(locate_beir_folder(first.config["dataset_path"], first.split))
    except (HarnessError, OSError, KeyError, TypeError):
        return ""
    matching = [r.where for r in (first, other) if not data_changes(r.fingerprints, current)]
    return f"; the folder as it is now matches {matching[0]}" if len(matching) == 1 else ""


def result_label(result: Result) -> str:
    """A result's label (results written before labels existed are labelled by their model)."""
    return result.label or result.model


def write_results_csv(output_dir: str | Path) -> Path:
    """Rewrite ``<output_dir>/results.csv`` (atomically) from every result file under it."""
    path = Path(output_dir) / "results.csv"
    with atomic_writer(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=RESULTS_CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(results_rows(output_dir))
    return path


def result_paths(output_dir: str | Path, dataset: str, model: str, split: str, variant: str = "") -> tuple[Path, Path]:
    """The result JSON and run file paths for one evaluation (`variant` "" for the default configuration)."""
    folder = Path(output_dir) / model_slug(dataset) / model_slug(model)
    stem = model_slug(split) + (f".{model_slug(variant)}" if variant else "")
    return folder / f"{stem}.json", folder / f"{stem}.run.trec"


def write_result(result: Result, run: Run, output_dir: str | Path) -> tuple[Path, Path]:
    """Write the result JSON and the scored run, each atomically.

    A result of the same configuration computed on other data (its corpus, queries or qrels changed) is
    replaced with a warning that says which changed. A result of another configuration already at the path
    (an older release named files by model and split only) is first renamed to ``<stem>.kept-<its hash>.json`` with its run file,
    so that it is never lost.

    Returns:
        (result path, run path).

    Raises:
        OutputError: The folder cannot be written; any earlier result there is left intact.
    """
    json_path, run_path = result_paths(output_dir, result.dataset, result.model, result.split, result.variant)
    if json_path.parent.is_dir():
        remove_stale_temporaries(json_path.parent)
        _keep_other_configuration(json_path, run_path, result)
    write_run(run, run_path)
    # The run file's own hash, so that a later reader can tell it was not altered; then the file's own digest,
    # of the object as a reader will parse it (lists for tuples, string keys), so that it reads back the same.
    recorded = result.to_json()
    recorded["fingerprints"]["scored_run"] = content_sha256(run_path)
    recorded["fingerprints"][CONTENT_DIGEST] = result_digest(recorded)
    write_json(recorded, json_path)
    return json_path, run_path


def _keep_other_configuration(json_path: Path, run_path: Path, result: Result) -> None:
    previous = read_result(json_path)
    if previous is None:
        return
    if previous.config_hash == result.config_hash:
        changed = data_changes(previous.fingerprints, result.fingerprints)
        if changed:
            logger.warning(
                "%s: replacing the result of the same settings computed on other data (%s changed since %s)",
                json_path,
                " and ".join(changed),
                previous.created or "it was written",
            )
        return
    tag = (previous.config_hash or "v1")[:8]
    kept = json_path.with_name(f"{json_path.stem}.kept-{tag}.json")
    try:
        if run_path.is_file():
            os.replace(run_path, kept.with_name(f"{kept.stem}.run.trec"))
        os.replace(json_path, kept)
    except OSError as exc:
        raise OutputError(
            f"{json_path} holds a result of another configuration and cannot be moved aside "
            f"({exc.strerror or exc}); move it yourself"
        ) from exc
    logger.warning(
        "%s held a result of another configuration (%s); kept it as %s", json_path, result_label(previous), kept.name
    )


def format_metrics_table(result: Result) -> str:
    """A plain two-column table (metric, value) of the means at the cutoffs asked for, by family.

    The result stores more cutoffs (the standard set); ``--json`` and the result file show them all.
    """
    shown_k = {str(k) for k in result.config.get("k_values", ())}
    shown = {
        name: value
        for name, value in result.metrics.items()
        if not shown_k or "@" not in name or name.rsplit("@", 1)[-1] in shown_k
    }
    width = max((len(name) for name in shown), default=6)
    table = [
        ["metric", "value"],
        ["-" * width, "------"],
        *([name, metric_text(value)] for name, value in shown.items()),
    ]
    lines = [
        f"{result.dataset} [{result.split}] · {result.label or result.model} · {result.n_queries} judged queries",
        *align(table, right=[False, False]),
    ]
    if result.config.get("run_format"):
        lines.append(f"run read as {result.config['run_format']} ({result.config.get('run_file')})")
    if result.index_quality:
        lines.append(
            f"{result.config.get('index')} index: "
            + ", ".join(f"{name} {value:.4f}" for name, value in result.index_quality.items())
        )
    return "\n".join(lines)
