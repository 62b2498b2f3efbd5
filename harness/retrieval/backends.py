"""The encoder runtimes (``--backend``) by name: a registry that the runtimes register with.

A runtime takes a loaded sentence-transformers encoder, its backend's name and the cache root, and returns
the encoder that runs its model: ``torch``
is that encoder itself (`harness.retrieval.encode`); ``onnx`` and ``onnx-int8`` run its exported transformer
under ONNX Runtime (`harness.retrieval.onnx_backend`, which registers them when imported); ``openvino`` and
``openvino-int8`` run the same export under OpenVINO, the second quantized by NNCF on a `Calibration` sample
of the corpus being evaluated (`harness.runtimes.openvino_backend`). `EncoderSpec.load`
asks the registry, so the torch encoder's file never imports the runtimes built on it; the pipeline, which
loads every model (`harness.pipeline.config.load_model`), imports each runtime module once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError

BACKENDS = ("torch", "onnx", "onnx-int8", "openvino", "openvino-int8")
# Not a runtime: a probe picks one of `BACKENDS` (and a precision) for the machine (`harness.runtimes.auto`).
AUTO_BACKEND = "auto"
# The backends whose model is fitted to the corpus being evaluated (static int8: activation ranges measured on
# a sample of its texts): they load with a `Calibration`.
CALIBRATED_BACKENDS = ("openvino-int8",)


@dataclass(frozen=True)
class Calibration:
    """The texts a calibrated backend measures its activation ranges on: a seeded sample of the corpus.

    Attributes:
        texts: The sampled document texts, in corpus order.
        corpus_sha256: The corpus they were drawn from.
        requested: How many texts were asked for (a smaller corpus gives all its documents).
        seed: The sampling seed.
    """

    texts: tuple[str, ...]
    corpus_sha256: str
    requested: int
    seed: int

    def identity(self) -> dict[str, Any]:
        """What the cache key and the result record of the sample: where from, how drawn, its hash."""
        digest = hashlib.sha256()
        for text in self.texts:
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
        return {"corpus_sha256": self.corpus_sha256, "requested": self.requested, "drawn": len(self.texts),
                "seed": self.seed, "texts_sha256": digest.hexdigest()}


# backend name → runtime(torch encoder, backend name, cache root, calibration) → the encoder that runs it
_RUNTIMES: dict[str, Callable[..., Any]] = {}


def register(name: str, runtime: Callable[..., Any]) -> None:
    """Make `runtime` the one that backend `name` (one of `BACKENDS`) loads with."""
    if name not in BACKENDS:
        raise HarnessError(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}")
    _RUNTIMES[name] = runtime


def runtime(name: str) -> Callable[..., Any]:
    """The runtime registered for backend `name`.

    Raises:
        HarnessError: No runtime registered that name (its module was not imported).
    """
    try:
        return _RUNTIMES[name]
    except KeyError:
        raise HarnessError(f"backend {name!r} has no runtime registered; import harness.retrieval.onnx_backend "
                           "(it registers onnx and onnx-int8) or harness.runtimes.openvino_backend") from None
