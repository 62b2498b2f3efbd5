"""Bench grids: every system on every dataset, resumable, with a summary table and results.csv.

A system is a model (``bm25``, a bi-encoder, a sparse encoder), ``FIRST >> CROSS_ENCODER@DEPTH``, or a
fusion of systems (`harness.pipeline.systems`); each cell is an `evaluate_dataset` run, each fusion a
`fuse_results` over its systems' saved runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import __version__
from harness.datasets import registry
from harness.datasets.catalog import locate_dataset, resolve_dataset
from harness.errors import HarnessError, setting
from harness.io.outputs import check_output_dir
from harness.pipeline.candidates import check_candidate_sets, make_candidates, uses_candidates
from harness.pipeline.evaluate import (
    EvaluateConfig,
    configuration,
    evaluate_dataset,
    load_model,
    settled_backend,
    with_model_prompts,
)
from harness.pipeline.fuse import fuse_results
from harness.pipeline.systems import System, configure, parse_system, parse_systems, system_of
from harness.pipeline.systems.registry import KNOWN_NAMES
from harness.presentation import align, metric_text
from harness.retrieval.compress import CompressionSpec
from harness.retrieval.encode import Encoder
from harness.retrieval.models import check_model_available
from harness.runtimes.registry import is_auto, runtime

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    """One dataset × model cell of a bench grid."""

    dataset: str
    model: str
    status: str  # "done", "skipped" (same config and data already written) or "failed"
    metrics: dict[str, float] = field(default_factory=dict)
    error: str = ""
    why: str = ""  # why a cell with a stored result was done again (e.g. "qrels changed since the stored result")


@dataclass(frozen=True)
class BenchReport:
    """What `run_bench` did, cell by cell, and where the long-form CSV went."""

    cells: list[Cell]
    csv_path: Path | None

    @property
    def failed(self) -> list[Cell]:
        return [cell for cell in self.cells if cell.status == "failed"]

    def format_table(self, metric: str = "nDCG@10") -> str:
        """Datasets × models for one metric; failed cells say so, the errors follow the table."""
        datasets = list(dict.fromkeys(cell.dataset for cell in self.cells))
        models = list(dict.fromkeys(cell.model for cell in self.cells))
        by_key = {(cell.dataset, cell.model): cell for cell in self.cells}

        def show(cell: Cell | None) -> str:
            if cell is None:
                return "-"
            if cell.status == "failed":
                return "failed"
            value = cell.metrics.get(metric)
            return metric_text(value) if value is not None else "n/a"

        rows = [[metric, *models]] + [
            [dataset, *(show(by_key.get((dataset, m))) for m in models)] for dataset in datasets
        ]
        for family, title in (
            ("cqadupstack", "cqadupstack (mean of {n} forums)"),
            (registry.NANOBEIR, "NanoBEIR (mean of {n})"),
        ):
            parts = registry.get(family).subsets
            means = []
            for m in models:
                cells = {part: by_key.get((f"{family}/{part}", m)) for part in parts}
                mean, _ = registry.subset_mean(
                    family,
                    {
                        part: cell.metrics.get(metric) if cell is not None and cell.status != "failed" else None
                        for part, cell in cells.items()
                    },
                )
                means.append(metric_text(mean) if mean is not None else "-")
            if any(mean != "-" for mean in means):
                rows.append([title.format(n=len(parts)), *means])
        lines = align(rows, right=[False] + [True] * len(models))
        counts = {status: sum(c.status == status for c in self.cells) for status in ("done", "skipped", "failed")}
        lines.append(
            f"{len(self.cells)} cells: {counts['done']} done, {counts['skipped']} skipped "
            f"(already done on the same data with the same settings), {counts['failed']} failed"
        )
        lines += [f"redone: {cell.dataset} × {cell.model}: {cell.why}" for cell in self.cells if cell.why]
        lines += [f"failed: {cell.dataset} × {cell.model}: {cell.error}" for cell in self.failed]
        return "\n".join(lines)


def expand_datasets(datasets: list[str]) -> list[str]:
    """Registry names with sub-corpora become their parts: ``cqadupstack`` → its 12 forums."""
    expanded = []
    for dataset in datasets:
        spec = registry.lookup(dataset) if not Path(dataset).is_dir() else None
        expanded += [f"{dataset}/{part}" for part in spec.subsets] if spec and spec.subsets else [dataset]
    return expanded


def _display_name(dataset: str) -> str:
    """A folder's own name, or the registry name (``cqadupstack/android`` stays whole)."""
    if Path(dataset).is_dir():
        return Path(dataset).resolve().name
    return dataset if registry.lookup(dataset.split("/")[0]) is not None else Path(dataset).name


def system_config(base: EvaluateConfig, system: str) -> EvaluateConfig:
    """`base` set up for one system of a grid (`harness.pipeline.systems.configure` of the system parsed): a model,
    ``bm25``, ``run:FILE``, or a first stage and a reranker written ``FIRST >> CROSS_ENCODER@DEPTH`` (depth 100 when
    omitted; the rerank batch size and max length come from `base.rerank`).

    Raises:
        HarnessError: A malformed system (an empty stage, a depth that is not a number), or a fusion.
    """
    return configure(parse_system(system), base)


def run_bench(
    models: list[str],
    datasets: list[str],
    base: EvaluateConfig,
    force: bool = False,
    compressions: Sequence[CompressionSpec] = (),
) -> BenchReport:
    """Evaluate every system on every dataset with the settings of `base`.

    Each cell is an `evaluate_dataset` run writing its result files. A cell whose result exists
    with the same configuration (`config_hash`) and harness version is skipped unless `force`. A cell
    that fails with a HarnessError is reported and the grid goes on. A model is loaded once for all its
    datasets. A fusion's systems are evaluated too (added to the grid when not listed), then their saved
    runs fused (`fuse_results`; milliseconds, so always redone). At the end, ``<output_dir>/results.csv``
    is rewritten from every result under the output folder.

    Args:
        models: Systems: model names or folders, ``bm25``, ``FIRST >> CROSS_ENCODER@DEPTH``
            (`system_config`), or fusions ``METHOD(SYSTEM, SYSTEM, ...)`` (`harness.pipeline.systems`), each
            optionally ``LABEL=SYSTEM``: its label in every table (with a compression axis, ``LABEL [dim256]``).
        datasets: Registry names or BEIR folders.
        base: Settings shared by every cell (its model and dataset are replaced; with several models, its `name`
            becomes ``<name>: <model>``). With ``candidates``, each dataset's candidate set is made before its cells
            (`harness.pipeline.candidates`) and every system written ``>> CROSS_ENCODER`` reranks it; a set that
            fails when made fails those cells of its dataset, with its reason, and the grid goes on.
        force: Redo cells that are already done.
        compressions: More axes for dense systems (`harness.retrieval.compress.compression_grid`): each dense
            system is evaluated once per truncation × precision, all from the same cached float32 vectors;
            BM25 and sparse systems once. Empty: `base.compression` alone.

    Raises:
        HarnessError: A malformed system or label, two systems sharing a label, fusions asked for with no
            output folder, a dataset or model that cannot be found (`check_grid`), a candidate set that cannot fit
            (a run file naming a query or document of another dataset, a candidate system that cannot run:
            `harness.pipeline.candidates.check_candidate_sets`); before any cell runs.
    """
    from harness.reporting.report import write_results_csv

    check_output_dir(base.output_dir)  # before the first cell: a cell's failure would not stop the grid
    listed = parse_systems(list(models))
    labels = {system.spec: system.label for system in listed if system.label}
    fusions = [system for system in listed if system.fusion is not None]
    if fusions and base.output_dir is None:
        raise HarnessError("fusion systems fuse the runs saved beside their systems' results; set output_dir")
    systems = [system.spec for system in listed if system.fusion is None]
    systems += [member.spec for fused in fusions for member in fused.members if member.spec not in systems]
    systems = list(dict.fromkeys(systems))
    datasets = expand_datasets(datasets)
    check_grid(systems, datasets, base)
    reranks_candidates = any(uses_candidates(system) for system in systems)
    if base.candidates is not None and not reranks_candidates:
        raise HarnessError(
            f"{setting('candidates')} gives reranks written '>> CROSS_ENCODER' their first stage; no system is one"
        )
    if reranks_candidates:  # every dataset's candidate set, and the systems that make it, before the first cell
        check_grid(check_candidate_sets(base, datasets), [], replace(base, candidates=None))
    grid = _Grid(base, force, len(systems) + len(fusions), list(compressions), labels)
    for dataset in datasets:
        if reranks_candidates:  # one candidate set per dataset, made before its cells: every rerank reranks it
            grid.base, grid.unmade = _candidate_set(base, dataset)
        saved = {system: grid.system(dataset, system) for system in systems}
        for fused in fusions:
            grid.fuse(dataset, fused, saved)
    csv_path = write_results_csv(base.output_dir) if base.output_dir is not None else None
    return BenchReport(grid.cells, csv_path)


def check_grid(systems: Sequence[str], datasets: Sequence[str], base: EvaluateConfig) -> None:
    """Every name of a grid checked before its first cell runs, so that a typo in the last one costs no cell: each
    dataset is found as `evaluate` finds it (a folder, an installed or downloadable registry name, a custom dataset;
    nothing downloaded here), each system is well formed (`system_config`), and each model and reranker it names is
    a local folder, in the Hugging Face cache or on a reachable hub.

    Raises:
        HarnessError: The first name that cannot run, with `evaluate`'s message for it.
    """
    for dataset in datasets:
        locate_dataset(dataset, base.data_dir, base.download)
    for system in systems:
        config = system_config(base, system)
        if system_of(config).stage.kind.weights:
            check_model_available(config.model, known=KNOWN_NAMES)
        if config.rerank is not None:
            check_model_available(config.rerank.model)


def _candidate_set(base: EvaluateConfig, dataset: str) -> tuple[EvaluateConfig, str]:
    """(`base` with `dataset`'s candidate set made, "") or, where making it fails, (`base` without candidates, why):
    the cells that rerank the set then fail with that reason, and the others run."""
    try:
        return make_candidates(replace(base, dataset_path=dataset), evaluate_dataset), ""
    except HarnessError as exc:
        logger.error("%s: the candidate set failed: %s", dataset, exc)
        return replace(base, candidates=None), str(exc)


def _changed_data(config: EvaluateConfig, stored) -> list[str]:
    """The data files (corpus, queries, qrels, an external run) whose content differs from what `stored` was
    computed on; a folder that cannot be read now counts as changed (evaluating it again says why)."""
    from harness.io.formats import locate_beir_folder
    from harness.io.lines import content_sha256
    from harness.reporting.report import data_changes, folder_fingerprints

    try:
        folder_path, _ = resolve_dataset(config.dataset_path, config.data_dir, download=False)
        current = folder_fingerprints(locate_beir_folder(folder_path, config.split))
        if config.run_path is not None:
            current["run"] = content_sha256(config.run_path)
    except (HarnessError, OSError):
        return ["the dataset folder"]
    changed = data_changes(stored.fingerprints, current)
    if config.run_path is not None and stored.fingerprints.get("run") not in (None, current["run"]):
        changed.append("the run file")
    return changed


class _CellPrefix(logging.Filter):
    """Starts each warning logged during one bench cell with the cell's name (``scifact × bm25: ...``)."""

    def __init__(self, cell: str):
        super().__init__()
        self.cell = cell

    def filter(self, record: logging.LogRecord) -> bool:
        # Once per record: several handlers may run this filter on the same record.
        if record.levelno >= logging.WARNING and not getattr(record, "bench_cell", None):
            message = record.getMessage()
            if not message.startswith(self.cell):
                record.msg, record.args = f"{self.cell}: {message}", ()
            record.bench_cell = self.cell
        return True


@contextmanager
def naming_cell(cell: str) -> Iterator[None]:
    """While inside, warnings reaching the harness's (and the root logger's) handlers name `cell`."""
    prefix = _CellPrefix(cell)
    handlers = [*logging.getLogger("harness").handlers, *logging.getLogger().handlers]
    for handler in handlers:
        handler.addFilter(prefix)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(prefix)


class _Grid:
    """The cells of one bench run, and the models loaded for them (once each)."""

    def __init__(
        self,
        base: EvaluateConfig,
        force: bool,
        per_dataset: int,
        compressions: list[CompressionSpec] | None = None,
        labels: dict[str, str] | None = None,
    ):
        self.base, self.force, self.per_dataset = base, force, per_dataset
        self.compressions = compressions or []
        self.labels = labels or {}  # system → the label given with LABEL=SYSTEM
        self.cells: list[Cell] = []
        self.encoders: dict[str, Encoder] = {}
        self.unmade = ""  # why the current dataset's candidate set could not be made ("": made, or none asked for)

    def system(self, dataset: str, system: str) -> Path | None:
        """A system's cells on `dataset`: one, or one per compression for a dense system; returns the path of
        the (first) result, the one a fusion reads, None when it failed (or reranks a set that could not be made)."""
        if self.unmade and uses_candidates(system):
            shown, _ = self._names(system, None)
            error = f"its candidate set could not be made: {self.unmade}"
            self.cells.append(Cell(_display_name(dataset), shown, "failed", error=error))
            return None
        config = system_config(replace(self.base, dataset_path=dataset), system)
        if not self.compressions or not system_of(config).stage.kind.vectors:  # BM25, sparse: once
            return self.cell(dataset, system)
        paths = [self.cell(dataset, system, spec) for spec in self.compressions]
        return paths[0]

    def cell(self, dataset: str, system: str, compression: CompressionSpec | None = None) -> Path | None:
        """Evaluate (or skip) one cell; returns the path of its result file, None when it failed."""
        base = self.base if compression is None else replace(self.base, compression=compression)
        system_name, label = self._names(system, compression)
        # The registry's prompts before anything reads the configuration: the stored result's hash and the
        # model loaded here must both see them.
        name = _display_name(dataset)
        with naming_cell(f"{name} × {system_name}"):
            config = with_model_prompts(system_config(replace(base, dataset_path=dataset, name=label), system))
        logger.info("cell %d: %s × %s", len(self.cells) + 1, dataset, system_name)
        # An auto cell's result is stored under the backend its probe picked (remembered in the cache).
        settled = settled_backend(config) if is_auto(config.encoder.backend) and config.cache else config
        stored = self._stored(settled, name) if base.output_dir is not None and not self.force else None
        if stored is not None and not stored[2]:
            logger.info(
                "skipping %s × %s: done with the same settings and data (--force to redo)", dataset, system_name
            )
            self.cells.append(Cell(name, system_name, "skipped", stored[1].metrics))
            return stored[0]
        why = f"{' and '.join(stored[2])} changed since the stored result" if stored is not None else ""
        if why:
            logger.warning("%s × %s: %s; evaluating it again", dataset, system_name, why)
        try:
            with naming_cell(f"{name} × {system_name}"):
                encoder = None
                # A calibrated backend's model is fitted to each corpus: the dense stage loads it there; auto's
                # probe reads each corpus's texts and picks the backend before anything loads.
                if (
                    system_of(config).stage.kind.vectors
                    and not is_auto(config.encoder.backend)
                    and not runtime(config.encoder.backend).calibrated
                ):
                    if config.model not in self.encoders:
                        self.encoders[config.model] = load_model(config)
                    encoder = self.encoders[config.model]
                outcome = evaluate_dataset(config, encoder=encoder)
        except HarnessError as exc:
            logger.error("%s × %s failed: %s", dataset, system, exc)
            self.cells.append(Cell(name, system_name, "failed", error=str(exc)))
            return None
        if outcome.paths:
            logger.info("wrote %s", outcome.paths[0])
        self.cells.append(Cell(outcome.result.dataset, system_name, "done", outcome.result.metrics, why=why))
        return outcome.paths[0] if outcome.paths else None

    def _names(self, system: str, compression: CompressionSpec | None) -> tuple[str, str | None]:
        """A cell's name in the bench table, and the label its result gets (None: derived from its settings).

        A label given with LABEL=SYSTEM is both; with a compression axis each cell adds its compression
        (``e5 [dim256 int8]``), so that no two results of the grid share a label."""
        suffix = f" [{compression.label()}]" if compression is not None and compression.label() else ""
        given = self.labels.get(system)
        if given is not None:
            return given + suffix, given + suffix
        name = self.base.name
        return system + suffix, f"{name}: {system}{suffix}" if name and self.per_dataset > 1 else name

    def _stored(self, config: EvaluateConfig, name: str):
        """(path, result, the data files changed since) of this cell's stored result when it exists with the same
        configuration and version, else None; the cell is done only when nothing changed.

        A truncation to the model's full dimension is no truncation, so its result is the untruncated one
        (recognised by the dimension it records)."""
        done = self._done(config, name)
        if done is None:
            return None
        changed = _changed_data(config, done[1])
        if config.name and done[1].label != config.name:  # not a setting, yet a rerun with a new one must show it
            changed.append(f"the label (was {done[1].label!r})")
        return (*done, changed)

    def _done(self, config: EvaluateConfig, name: str):
        from harness.reporting.report import note_undigested, read_result, result_paths, result_problems

        candidates = [(config, None)]
        if config.compression.truncate_dim is not None:
            untruncated = replace(config, compression=replace(config.compression, truncate_dim=None))
            candidates.append((untruncated, config.compression.truncate_dim))
        for candidate, dimension in candidates:
            identity = configuration(candidate, name)
            path = result_paths(self.base.output_dir, name, identity.model, self.base.split, identity.variant)[0]
            previous = read_result(path)
            if (
                previous is not None
                and previous.config_hash == identity.config_hash
                and previous.versions.get("beir-harness") == __version__
                and (dimension is None or previous.config.get("dimension") == dimension)
            ):
                problems = result_problems(previous)
                if problems:  # an edited result is never served: the cell runs again and replaces it
                    logger.warning("%s; running the cell again", "; ".join(problems))
                    continue
                note_undigested([previous])
                return path, previous
        return None

    def fuse(self, dataset: str, fused: System, saved: dict[str, Path | None]) -> None:
        """Fuse the saved runs of `fused`'s systems on `dataset` (a failed system fails the fusion)."""
        name = _display_name(dataset)
        given = self.labels.get(fused.spec)
        shown = given or fused.spec
        members = [member.spec for member in fused.members]
        missing = [member for member in members if saved.get(member) is None]
        if missing:
            self.cells.append(Cell(name, shown, "failed", error=f"{missing[0]} failed, so it cannot be fused"))
            return
        label = given or (f"{self.base.name}: {fused.spec}" if self.base.name else None)
        try:
            outcome = fuse_results(
                [saved[member] for member in members], fused.fusion, self.base.output_dir, name=label
            )
        except HarnessError as exc:
            logger.error("%s × %s failed: %s", dataset, shown, exc)
            self.cells.append(Cell(name, shown, "failed", error=str(exc)))
            return
        self.cells.append(Cell(outcome.result.dataset, shown, "done", outcome.result.metrics))
