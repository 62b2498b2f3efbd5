"""Run BEIR's own pipeline beside ours on the same data and model, and compare the numbers.

BEIR's side is exactly what its README prescribes: ``GenericDataLoader(...).load(split)``,
``models.SentenceBERT``, ``DenseRetrievalExactSearch`` with cosine similarity,
``EvaluateRetrieval.evaluate`` and ``evaluate_custom(..., "mrr")``. BEIR's exact search always drops a
document whose id equals the query id, so ours runs with ``ignore_identical_ids=True`` here to
compare like with like. BEIR rounds its means to 5 decimals, so differences up to 5e-6 are rounding.
BEIR's loader reads plain files only; gzip-compressed files are decompressed into a temporary folder.
"""

from __future__ import annotations

import gzip
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError, MissingDependencyError
from harness.io.formats import locate_beir_folder
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.pipeline.systems.registry import BM25, DENSE, parse_system
from harness.retrieval.models import resolve_model_source
from harness.runtimes.spec import EncoderSpec

logger = logging.getLogger(__name__)


@dataclass
class CrossCheck:
    """Both metric sets, their differences, and the wall time of each side."""

    dataset: str
    model: str
    ours: dict[str, float]
    beir: dict[str, float]
    seconds: dict[str, float] = field(default_factory=dict)

    def differences(self) -> dict[str, float]:
        return {name: self.ours[name] - self.beir[name] for name in self.ours if name in self.beir}

    def largest(self) -> float:
        return max((abs(d) for d in self.differences().values()), default=0.0)

    def format_text(self, tolerance: float) -> str:
        from harness.presentation import align

        table = [["metric", "ours", "BEIR", "difference", ""]]
        table += [
            [
                name,
                f"{self.ours[name]:.5f}",
                f"{self.beir[name]:.5f}",
                f"{difference:+.2e}",
                "" if abs(difference) <= tolerance else "<-- differs",
            ]
            for name, difference in self.differences().items()
        ]
        lines = [
            f"{self.dataset} · {self.model} · ours vs BEIR's own pipeline (self-hits dropped on both sides)",
            *align(table, right=[False, True, True, True, False]),
        ]
        verdict = "AGREE" if self.largest() <= tolerance else "DIFFER"
        lines.append(
            f"{verdict}: largest |difference| {self.largest():.2e} (tolerance {tolerance:g}; BEIR rounds "
            f"to 5 decimals). Wall time: ours {self.seconds.get('ours', 0):.1f} s, "
            f"BEIR {self.seconds.get('beir', 0):.1f} s"
        )
        return "\n".join(lines)


def _plain_copy(folder, split: str, target: Path) -> Path:
    """A BEIR folder of plain files (BEIR's loader cannot read .gz)."""
    files = {"corpus.jsonl": folder.corpus, "queries.jsonl": folder.queries, f"qrels/{split}.tsv": folder.qrels}
    for name, source in files.items():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        with (
            gzip.open(source, "rb") if source.name.endswith(".gz") else open(source, "rb") as src,
            open(destination, "wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
    return target


def crosscheck(
    dataset: str | Path,
    model: str,
    split: str = "test",
    k_values: tuple[int, ...] = (1, 3, 5, 10, 100),
    batch_size: int = 32,
    data_dir: Path | None = None,
    download: bool = True,
    cache: bool = True,
    cache_dir: Path | None = None,
    progress: bool = True,
    device: str | None = None,
) -> CrossCheck:
    """Evaluate `model` on `dataset` with beir-harness and with BEIR's pipeline.

    Both sides run on the same device (`device`, resolved as `harness.retrieval.devices.DeviceSpec` does;
    a device list is cut to its first device, since BEIR's search runs one model).

    Raises:
        HarnessError: BM25 (BEIR's BM25 needs Elasticsearch) or bad input.
        MissingDependencyError: beir is not installed.
    """
    kind = parse_system(model).kind
    if kind is BM25:
        raise HarnessError("crosscheck compares dense models; BEIR's own BM25 needs an Elasticsearch server")
    if kind is not DENSE:
        raise HarnessError(f"crosscheck compares dense models (BEIR's SentenceBERT); {model!r} is {kind.what}")
    try:
        from beir.datasets.data_loader import GenericDataLoader
        from beir.retrieval.evaluation import EvaluateRetrieval
        from beir.retrieval.models import SentenceBERT
        from beir.retrieval.search.dense import DenseRetrievalExactSearch
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise MissingDependencyError("crosscheck needs beir (pip install beir)") from exc

    k_values = tuple(sorted(set(k_values)))
    from harness.retrieval.devices import DeviceSpec

    device = DeviceSpec(device).resolve()[0]
    started = time.perf_counter()
    outcome = evaluate_dataset(
        EvaluateConfig(
            dataset_path=dataset,
            split=split,
            model=model,
            k_values=k_values,
            top_k=max(k_values),
            encoder=EncoderSpec(batch_size=batch_size),
            ignore_identical_ids=True,
            output_dir=None,
            data_dir=data_dir,
            download=download,
            cache=cache,
            cache_dir=cache_dir,
            progress=progress,
            device=device,
        )
    )
    ours_seconds = time.perf_counter() - started
    folder = locate_beir_folder(outcome.result.config["dataset_path"], split)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="beir-harness-crosscheck-") as tmp:
        plain = _plain_copy(folder, split, Path(tmp))
        corpus, queries, qrels = GenericDataLoader(data_folder=str(plain)).load(split=split)
        for doc in corpus.values():
            # BEIR's search crashes on "title": null (it concatenates None); our reader reads it as "".
            if doc.get("title") is None:
                doc["title"] = ""
        retriever = EvaluateRetrieval(
            DenseRetrievalExactSearch(
                SentenceBERT(resolve_model_source(model), device=device),
                batch_size=batch_size,
                # BEIR's own "Batches" bars are third-party output: only with -vv.
                show_progress_bar=progress and logging.getLogger("harness").isEnabledFor(logging.DEBUG),
            ),
            score_function="cos_sim",
            k_values=list(k_values),
        )
        results = retriever.retrieve(corpus, queries)
        ndcg, _map, recall, precision = retriever.evaluate(qrels, results, list(k_values), ignore_identical_ids=True)
        mrr = retriever.evaluate_custom(qrels, results, list(k_values), metric="mrr")
    beir_seconds = time.perf_counter() - started
    beir = {}
    for family, values in (("nDCG", ndcg), ("MAP", _map), ("Recall", recall), ("P", precision), ("MRR", mrr)):
        for name, value in values.items():
            beir[f"{family}@{name.split('@')[1]}"] = value
    ours = {name: value for name, value in outcome.result.metrics.items() if name in beir}
    return CrossCheck(
        outcome.result.dataset, outcome.result.model, ours, beir, {"ours": ours_seconds, "beir": beir_seconds}
    )
