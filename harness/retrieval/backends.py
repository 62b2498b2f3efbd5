"""The encoder runtimes (``--backend``) by name: a registry that the runtimes register with.

A runtime takes a loaded sentence-transformers encoder, its backend's name and the cache root, and returns
the encoder that runs its model: ``torch``
is that encoder itself (`harness.retrieval.encode`); ``onnx`` and ``onnx-int8`` run its exported transformer
under ONNX Runtime (`harness.retrieval.onnx_backend`, which registers them when imported). `EncoderSpec.load`
asks the registry, so the torch encoder's file never imports the runtimes built on it; the pipeline, which
loads every model (`harness.pipeline.config.load_model`), imports each runtime module once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

BACKENDS = ("torch", "onnx", "onnx-int8")

# backend name → runtime(torch encoder, backend name, cache root) → the encoder that runs it
_RUNTIMES: dict[str, Callable[[Any, str, Path], Any]] = {}


def register(name: str, runtime: Callable[[Any, str, Path], Any]) -> None:
    """Make `runtime` the one that backend `name` (one of `BACKENDS`) loads with."""
    if name not in BACKENDS:
        raise HarnessError(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}")
    _RUNTIMES[name] = runtime


def runtime(name: str) -> Callable[[Any, str, Path], Any]:
    """The runtime registered for backend `name`.

    Raises:
        HarnessError: No runtime registered that name (its module was not imported).
    """
    try:
        return _RUNTIMES[name]
    except KeyError:
        raise HarnessError(f"backend {name!r} has no runtime registered; import harness.retrieval.onnx_backend "
                           "(it registers onnx and onnx-int8)") from None
