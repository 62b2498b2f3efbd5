"""Fusing saved results: the runs beside results of one dataset become one scored, written result; and
fusing run files without qrels (``fuse RUN RUN ... --out FUSED``, `fuse_run_files`): TREC, MS MARCO or JSON
runs in, one fused TREC run out, by the same methods and settings, nothing scored (a team with runs and no
judgments fuses them here, then pools or evaluates the fused run). Each run is named by its tag (else its
file name); the fused run's tag is the fusion's label (``rrf(bm25, e5)``) unless a name is given."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from harness.errors import HarnessError
from harness.evaluation.metrics import evaluate, standard_metrics
from harness.host import host_info, versions
from harness.io.formats import locate_beir_folder, read_qrels, read_run, write_run
from harness.io.outputs import check_output_dir, check_output_file
from harness.metering import peak_rss
from harness.pipeline.config import stored_cutoffs
from harness.pipeline.stages import Outcome
from harness.records import Qrels, Run
from harness.reporting.labels import check_label, tag_label
from harness.reporting.report import Result, check_results, check_same_data, read_result, write_result
from harness.reporting.variant import Configuration
from harness.retrieval.fusion import FusionSpec, fuse

logger = logging.getLogger(__name__)


def _same_data_inputs(paths: list[Path]) -> list[tuple[Path, Result]]:
    """(path, result) of each result file, refused unless each passes its checks (`check_results`: its content
    digest, its means, its run file unaltered) and all are of one dataset and split, on the same data."""
    inputs = [(Path(path), Result.from_json(path)) for path in paths]
    check_results([data for _, data in inputs], run_file=True)
    first_path, first = inputs[0]
    for path, data in inputs[1:]:
        for key in ("dataset", "split"):
            if getattr(data, key) != getattr(first, key):
                raise HarnessError(
                    f"cannot fuse results of different {key}s: {first_path} is {getattr(first, key)}, "
                    f"{path} is {getattr(data, key)}"
                )
    check_same_data([data for _, data in inputs])
    return inputs


def _unchanged_qrels(first: Result) -> Qrels:
    """The qrels the results were scored with, read again; refused when the file changed since."""
    folder = locate_beir_folder(first.config["dataset_path"], first.split)
    digest = hashlib.sha256()
    qrels = read_qrels(folder.qrels, digest)
    if digest.hexdigest() != first.fingerprints.get("qrels"):
        raise HarnessError(
            f"{folder.qrels} changed since the results were scored (its fingerprint differs); rerun the evaluations"
        )
    return qrels


def fuse_results(
    paths: list[Path], spec: FusionSpec, output_dir: Path | None = Path("results"), name: str | None = None
) -> Outcome:
    """Fuse the runs saved beside results of one dataset, score the fused run, write it as a result.

    Args:
        paths: Result JSON files (each with its ``.run.trec`` beside it).
        spec: How to fuse (`harness.retrieval.fusion`).
        output_dir: Where the fused result goes (``<dataset>/fusion/<split>.<variant>.json``); None
            writes nothing.
        name: The label of the fused result; default `FusionSpec.label` of the inputs' labels, e.g.
            ``wsum(bm25, e5; 0.3:0.7, zscore)`` (the method, the members and the settings that differ from
            the defaults).

    Raises:
        HarnessError: Results of different datasets or splits; a run file missing or altered since its result
            was written; qrels changed since; bad fusion settings; a `name` that is empty or has an unbalanced
            bracket.
        DataMismatchError: Results computed on different corpus, queries or qrels.
    """
    check_output_dir(output_dir)
    started = time.perf_counter()
    spec.check(len(paths))
    name = check_label(name) if name is not None else None
    inputs = _same_data_inputs(paths)
    notes: list[str] = []
    runs = [_saved_run(data, notes) for _, data in inputs]
    qrels = _unchanged_qrels(inputs[0][1])
    return _fused(inputs, runs, qrels, spec, output_dir, name, notes, started)


def fuse_outcomes(
    outcomes: list[Outcome], spec: FusionSpec, output_dir: Path | None = Path("results"), name: str | None = None
) -> Outcome:
    """Fuse the runs of evaluations just made (``evaluate`` of a fusion), as `fuse_results` fuses them once saved:
    the same fusion, cutoffs, identity and result.

    Raises:
        HarnessError: Bad fusion settings or `name`; evaluations of different datasets, splits or data.
    """
    check_output_dir(output_dir)
    started = time.perf_counter()
    spec.check(len(outcomes))
    name = check_label(name) if name is not None else None
    inputs = [(outcome.paths[0] if outcome.paths else None, outcome.result) for outcome in outcomes]
    for key in ("dataset", "split"):
        if len({getattr(outcome.result, key) for outcome in outcomes}) > 1:
            raise HarnessError(f"cannot fuse evaluations of different {key}s")
    check_same_data([outcome.result for outcome in outcomes])
    runs = [as_saved(outcome.run) for outcome in outcomes]
    return _fused(inputs, runs, outcomes[0].qrels, spec, output_dir, name, [], started)


def as_saved(run: Run) -> Run:
    """`run` as its saved file reads back: a query with no documents has no line, so it is no query of the run (a
    fusion of runs just made then lists its queries in the order a fusion of the saved runs does)."""
    return Run.adopt({query_id: dict(run.scores_of(query_id)) for query_id in run if run.depth(query_id)}, run.name)


def _fused(
    inputs: list[tuple[Path | None, Result]],
    runs: list[Run],
    qrels: Qrels,
    spec: FusionSpec,
    output_dir: Path | None,
    name: str | None,
    notes: list[str],
    started: float,
) -> Outcome:
    """The fused, scored result of `runs` (one per input: its result file, None when not written, and result)."""
    first = inputs[0][1]
    for (path, data), run in zip(inputs, runs):
        deepest = max((run.depth(q) for q in run), default=0)
        if deepest < spec.depth:
            notes.append(
                f"{path.name if path else data.label or data.model}: at most {deepest} documents per query, fewer "
                f"than the fusion depth {spec.depth}"
            )
            logger.info(notes[-1])
    labels = [data.label or data.model for _, data in inputs]
    label = name if name is not None else spec.label(labels)
    fused = fuse(runs, spec, name=label)
    depth = spec.depth  # the cutoffs stored follow the depth asked for, not how many documents the fusion found
    evaluation = evaluate(qrels, fused, standard_metrics(stored_cutoffs(depth)))
    identity = Configuration.from_settings(
        "fusion",
        first.split,
        {"fusion": spec.to_config(), "inputs": sorted(data.config_hash or str(path) for path, data in inputs)},
        {},
    )
    result = Result(
        dataset=first.dataset,
        split=first.split,
        model="fusion",
        label=label,
        variant=identity.variant,
        metrics=evaluation.means,
        per_query=evaluation.per_query,
        n_queries=evaluation.n_queries,
        config={
            "fusion": spec.to_config(),
            "top_k": depth,
            "dataset_path": first.config["dataset_path"],
            "k_values": [10],
            "inputs": [
                {
                    "result": str(path) if path is not None else None,
                    "label": labels[i],
                    "model": data.model,
                    "config_hash": data.config_hash,
                    "run_sha256": data.fingerprints.get("scored_run"),
                }
                for i, (path, data) in enumerate(inputs)
            ],
            **({"qrels_provenance": first.config["qrels_provenance"]} if first.config.get("qrels_provenance") else {}),
        },
        fingerprints={
            key: value for key, value in first.fingerprints.items() if key in ("corpus", "queries", "qrels", "excluded")
        },
        timings={"total": round(time.perf_counter() - started, 4)},
        versions=versions(),
        host=host_info(),
        cost=_peak_memory(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        notes=notes,
        config_hash=identity.config_hash,
    )
    paths_written = write_result(result, fused, output_dir) if output_dir is not None else None
    return Outcome(result, fused, qrels, paths_written)


def _peak_memory() -> dict[str, int | None]:
    """A fusion's cost record: its wall time is in `timings`; nothing is encoded or searched."""
    rss = peak_rss()
    return {"peak_rss_bytes": rss["self"], "children_peak_rss_bytes": rss["children"]}


def _saved_run(data: Result, notes: list[str]) -> Run:
    """The run file beside a result (checked against the hash the result recorded by `_same_data_inputs`)."""
    run_path, path = data.run_path, data.path
    if not run_path.is_file():
        raise HarnessError(f"{run_path}: the run file beside {path.name} is missing; rerun that evaluation")
    if data.fingerprints.get("scored_run") is None:
        notes.append(f"{path.name} predates run fingerprints: its run file could not be checked")
        logger.warning(notes[-1])
    return read_run(run_path)


@dataclass
class FusedRun:
    """What `fuse_run_files` made: the fused run, where it went, and the names of the runs fused."""

    run: Run
    path: Path
    members: list[str]

    def format_text(self) -> str:
        n_queries = len(self.run)
        return (
            f"fused {len(self.members)} runs ({', '.join(self.members)}) into {self.path}: "
            f"{self.run.name}, {n_queries} queries (nothing scored: no qrels needed)"
        )


def is_result_file(path: str | Path) -> bool:
    """True for a beir-harness result file (scored; fused by `harness.pipeline.fuse.fuse_results`)."""
    return str(path).endswith(".json") and read_result(path) is not None


def fuse_run_files(paths: Iterable[str | Path], spec: FusionSpec, out: str | Path, name: str | None = None) -> FusedRun:
    """Fuse run files into one TREC run at `out` (atomically); nothing is scored.

    Raises:
        HarnessError: Bad fusion settings, a bad `name`, two runs under one name, an `out` among the inputs,
            or an unreadable run (naming the file and line); nothing is written.
    """
    paths = [Path(p) for p in paths]
    spec.check(len(paths))  # before any file is read
    scored = [p for p in paths if is_result_file(p)]
    if scored:
        raise HarnessError(
            f"{scored[0]}: a result file, not a run; fuse results without an output run (the fused "
            "run is then scored), or give the run files"
        )
    name = check_label(name) if name is not None else None
    out = Path(out)
    if any(out.resolve() == p.resolve() for p in paths):
        raise HarnessError(f"{out}: the fused run would overwrite one of the runs fused; choose another --out")
    check_output_file(out, "fused run")
    runs = [read_run(path) for path in paths]
    names = [tag_label(run.name) or path.stem for path, run in zip(paths, runs)]
    if len(set(names)) < len(names):
        names = [f"{n} ({p.name})" if names.count(n) > 1 else n for n, p in zip(names, paths)]
    fused = fuse(runs, spec, name or spec.label(names))
    write_run(fused, out)
    logger.info("fused %d runs into %s", len(runs), out)
    return FusedRun(fused, out, names)
