"""What preparing a runtime's model cost, step by step: the ONNX export (and ONNX Runtime's int8 quantization),
OpenVINO's calibration, quantization and compile, and which steps were served from the user cache.

An encoder that prepared a model carries its record (`Preparation.record`) as ``preparation``; the pipeline moves
those seconds out of the phase they were timed in into a ``prepare_model`` phase of their own and keeps the steps as
``cost.model_preparation`` (`harness.pipeline.stages.take_preparation`; docs/outputs.md).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Preparation:
    """Seconds per preparation step (``export``, ``quantize``, ``calibration``, ``read``, ``compile``) and the
    steps served from the cache (`cached`: the ONNX export, the quantized model, OpenVINO's compiled blob)."""

    seconds: dict[str, float] = field(default_factory=dict)
    cached: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def record(self) -> dict[str, Any]:
        """Seconds per step (to 0.1 ms), their total and the cached steps."""
        steps = {name: round(value, 4) for name, value in self.seconds.items()}
        return {"seconds": round(sum(self.seconds.values()), 4), "steps": steps, "cached": list(self.cached)}
