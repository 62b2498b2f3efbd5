"""Results: the record of one evaluation, where it is written, and how it is shown.

One evaluation is written to ``<output_dir>/<dataset>/<model-slug>/<split>.json`` for the
default configuration, or ``<split>.<variant>.json`` for any other (`harness.reporting.variant`), and its
scored run beside it with ``.run.trec`` in place of ``.json`` (the exact run the metrics were
computed on, so ``trec_eval -c -m ndcg_cut.10 qrels <split>.run.trec`` gives the same numbers).
Both files are written atomically; the run first, so a result file never points at a missing
run. A rerun of one configuration replaces its own files; a file of another configuration found
at the same path (written by an older release) is kept under another name, never overwritten.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from harness.errors import DataMismatchError, HarnessError, OutputError, setting
from harness.io.files import atomic_writer, remove_stale_temporaries, write_json
from harness.io.lines import content_sha256
from harness.io.trec import write_run
from harness.presentation import align, metric_text
from harness.records import Run

logger = logging.getLogger(__name__)

RESULT_SCHEMA_VERSION = 3  # 2: label, variant; config_hash from `harness.reporting.variant`; 3: cost


@dataclass(frozen=True)
class Result:
    """Everything one evaluation produced and how it was produced.

    Attributes:
        dataset: Dataset name (the folder name for a folder path).
        split: The qrels split.
        model: Model name or local path, or ``run:<file>`` for an external run.
        metrics: canonical metric name → mean over every judged query.
        per_query: query_id → metric name → value.
        n_queries: Judged queries (the denominator of every mean).
        config: How the run was made: k values, depth, index, self-hit policy, batch size...
        fingerprints: sha256 of the uncompressed corpus, queries and qrels (and run) files; the
            written file also holds ``scored_run``, the sha256 of the run file beside it.
        timings: Seconds per phase: load, encode_corpus, encode_queries, index, search, score, and rerank,
            exact_search, latency_probe when they ran; encode (corpus + queries) and total (the wall time).
            Results written before cost records have load, encode, index, search, score, total.
        versions: Versions of python, beir-harness and the libraries that made the numbers.
        created: ISO-8601 UTC time the evaluation finished.
        notes: Warnings about the evaluation (e.g. judged queries missing from a run).
        index_quality: For an approximate index, the mean fraction of the exact top-k it found
            (``recall_of_exact@k``, measured against flat search on the same vectors and queries).
        config_hash: sha256 (16 hex digits) of the model, split and decisive settings that
            differ from the defaults (`harness.reporting.variant.Configuration`); `bench` skips a cell whose
            result has the same hash.
        host: The machine: CPU model, cores used, the SIMD flags that pick kernels, the GPU if
            one was used (`harness.host.host_info`).
        label: The name shown in tables and plots (``--name``, else model and variant tokens).
        variant: ``""`` for the default configuration, else the part of the file name that
            names the differing settings (e.g. ``hnsw-3f2a9c1d``).
        cost: What the run cost beyond `timings` (docs/outputs.md defines each field): the phases served from
            the cache, documents/s, queries/s, search latency p50/p95/p99 with its per-query sample, peak RSS,
            index and cache bytes, an endpoint's requests, tokens and price. Not part of `config_hash`;
            ``{}`` for results written before it existed.
    """

    dataset: str
    split: str
    model: str
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    config: dict[str, Any]
    fingerprints: dict[str, str]
    timings: dict[str, float]
    versions: dict[str, str]
    created: str
    notes: list[str] = field(default_factory=list)
    index_quality: dict[str, float] = field(default_factory=dict)
    config_hash: str = ""
    label: str = ""
    variant: str = ""
    host: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    path: Path | None = field(default=None, compare=False, repr=False)  # the file it was read from

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to the result file."""
        data = asdict(self)
        del data["path"]
        return {"schema_version": RESULT_SCHEMA_VERSION, **data}

    @classmethod
    def from_json(cls, path: str | Path) -> Result:
        """Read a result file written by `write_result` (any schema version).

        A file written before labels existed gets its model as its label.

        Raises:
            HarnessError: The file cannot be read, is not JSON, or is not a beir-harness result.
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise HarnessError(f"{path}: cannot read the result file ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise HarnessError(f"{path}: not a beir-harness result file (invalid JSON: {exc})") from None
        missing = [key for key in _REQUIRED if not isinstance(data, dict) or key not in data]
        if missing:
            raise HarnessError(f"{path}: not a beir-harness result file (no {', '.join(missing)})")
        known = {spec.name for spec in fields(cls)} - {"path"}
        values = {key: value for key, value in data.items() if key in known}
        values.setdefault("label", "")
        values["label"] = values["label"] or data["model"]
        for key in ("config", "fingerprints", "timings", "versions", "host", "cost"):
            values[key] = values.get(key) or {}
        values.setdefault("created", "")
        return cls(**values, path=path)

    def to_frame(self):
        """The per-query values as a pandas DataFrame (one row per judged query, one column per metric), with
        the result's dataset, split, label and model in ``attrs``: for notebooks."""
        import pandas as pd

        frame = pd.DataFrame.from_dict(self.per_query, orient="index")
        frame.index.name = "query_id"
        frame.attrs.update(dataset=self.dataset, split=self.split, label=self.label or self.model, model=self.model)
        return frame

    @property
    def run_path(self) -> Path:
        """The run file beside the result file it was read from (`result_paths`' naming)."""
        if self.path is None:
            raise HarnessError(f"{self.where}: this result was never written, so it has no run file")
        return self.path.with_name(f"{self.path.stem}.run.trec")

    @property
    def where(self) -> str:
        """The file it was read from, for messages (its label when it was never written)."""
        return str(self.path) if self.path is not None else self.label or self.model


_REQUIRED = ("dataset", "split", "model", "metrics", "per_query", "n_queries")


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


def results_rows(output_dir: str | Path) -> list[dict[str, Any]]:
    """Long-form rows (one per dataset × model × split × metric) of every result under `output_dir`."""
    rows = []
    for path in sorted(Path(output_dir).glob("*/*/*.json")):  # one file per configuration
        result = read_result(path)
        if result is None:
            continue
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
    return rows


# The files a result's numbers depend on; the queries and corpus are shared by a dataset's splits.
DATA_FILES = ("corpus", "queries", "qrels")


def data_changes(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """The data files (of `DATA_FILES`) whose fingerprints differ; a file either side does not record is not
    compared (results written before fingerprints existed)."""
    return [name for name in DATA_FILES if recorded.get(name) and current.get(name) and recorded[name] != current[name]]


def data_tag(result: Result) -> str:
    """Eight hex digits naming the data a result was computed on (its corpus, queries and qrels fingerprints)."""
    joined = "\n".join(result.fingerprints.get(name, "") for name in DATA_FILES)
    return hashlib.sha256(joined.encode()).hexdigest()[:8]


def folder_fingerprints(folder) -> dict[str, str]:
    """sha256 of a BEIR folder's corpus, queries and split qrels as they are now (`BeirFolder`), as an
    evaluation records them; each file is hashed once per process while its size and mtime stay the same."""
    return {name: _file_sha256(Path(getattr(folder, name))) for name in DATA_FILES}


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
        changed = [name for name in data_changes(base.fingerprints, result.fingerprints) if name != "qrels"]
        changed += [name for name in data_changes(split_base.fingerprints, result.fingerprints) if name == "qrels"]
        if changed:
            clashes.append((split_base if changed == ["qrels"] else base, result, changed))
    return clashes


def _short(result: Result, name: str) -> str:
    return f"sha256 {result.fingerprints[name][:8]}…"


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


def model_slug(model: str) -> str:
    """A folder name for a model: ``org/name`` → ``org__name`` (as MTEB's results do).

    A local path keeps only its last component; characters outside ``[A-Za-z0-9._-]`` become
    ``_``, so the slug can never leave the output folder.
    """
    if model.startswith(("/", "./", "../", "~")) or "\\" in model:
        model = Path(model.rstrip("/\\")).name or "model"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.replace("/", "__")).strip("._") or "model"
    return slug


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
    # The run file's own hash, so that a later reader (fusion) can tell it was not altered.
    recorded = {**result.to_json(), "fingerprints": {**result.fingerprints, "scored_run": content_sha256(run_path)}}
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
