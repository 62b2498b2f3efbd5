"""The demo: the bundled lesson eval set (``harness/data/demo``, 15 products, 5 queries) and its evaluation."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from harness.pipeline.config import EvaluateConfig
from harness.pipeline.evaluate import Outcome, evaluate_dataset
from harness.retrieval.encode import Encoder
from harness.retrieval.models import DEFAULT_MODEL


def demo_folder() -> Path:
    """The bundled lesson eval set, a BEIR folder inside the package."""
    return Path(str(importlib.resources.files("harness").joinpath("data/demo")))


def run_demo(encoder: Encoder | None = None, model: str = DEFAULT_MODEL, progress: bool = False) -> Outcome:
    """Score the bundled lesson eval set (15 products, 5 queries) at k = 3 and 10.

    Nothing is written; the Outcome holds the per-query values and the run.
    """
    config = EvaluateConfig(
        dataset_path=demo_folder(),
        split="test",
        model=model,
        k_values=(3, 10),
        top_k=10,
        output_dir=None,
        dataset_name="demo",
        progress=progress,
        cache=False,
    )
    return evaluate_dataset(config, encoder=encoder)
