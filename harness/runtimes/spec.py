"""How a model turns texts into vectors (`EncoderSpec`): the settings a result's identity, the model-files key and
loading read, the backend among them, loaded through its runtime's record (`harness.runtimes.registry`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.retrieval import encode
from harness.runtimes.registry import is_auto, runtime

if TYPE_CHECKING:
    from harness.retrieval.encode import Encoder
    from harness.runtimes.calibration import Calibration


PROMPTS_GIVEN = "given"  # EncoderSpec.prompt_source: the caller chose the prefixes (even empty ones)


@dataclass(frozen=True)
class EncoderSpec:
    """How a model turns texts into vectors: what loading, the cache key and a result's identity read.

    Every field decides the vectors (and so enters the configuration hash, the model-files key and, through
    the encoder's settings, the embedding cache key) except the ones marked not decisive, which change
    speed or trust only.

    Attributes:
        max_seq_length: Override of the model's truncation length, in tokens.
        normalize: L2-normalize embeddings (cosine similarity); False scores raw dot products.
        query_prefix: Text prepended to each query before encoding (e.g. ``"query: "``).
        doc_prefix: Text prepended to each document before encoding (e.g. ``"passage: "``).
        backend: ``torch``, or ``onnx`` / ``onnx-int8`` to encode with ONNX Runtime
            (`harness.runtimes.onnx_backend`; needs the ``[onnx]`` extra), or ``openvino`` / ``openvino-int8``
            with OpenVINO (`harness.runtimes.openvino_backend`; the ``[openvino]`` extra), or ``auto``
            (`harness.runtimes.auto`); each is a record of `harness.runtimes.registry`.
        precision: ``fp32``, ``fp16`` or ``bf16`` weights and activations (also the reranker's).
        batch_size: Texts per forward pass (not decisive).
        trust_remote_code: Let the model run code from its repository (not decisive).
        probe: With backend ``auto``: run the full probe of every candidate, whatever the CPU class table and the
            cached choice say (``--probe``; not decisive: the result records the backend picked).
        prompt_source: Where the prefixes came from: ``""`` (not decided: the model registry's prompts apply when
            both prefixes are empty), `PROMPTS_GIVEN` (the caller's, even empty ones), ``model registry``
            (`harness.datasets.prompts`, recorded in the result). Not decisive: a registry prompt is the same
            configuration as the same prefix given by hand.
    """

    max_seq_length: int | None = None
    normalize: bool = True
    query_prefix: str = ""
    doc_prefix: str = ""
    backend: str = "torch"
    precision: str = "fp32"
    batch_size: int = field(default=32, metadata={"decisive": False})
    trust_remote_code: bool = field(default=False, metadata={"decisive": False})
    prompt_source: str = field(default="", metadata={"decisive": False})
    probe: bool = field(default=False, metadata={"decisive": False})

    def check(self) -> None:
        """Refuse impossible settings before anything loads.

        Raises:
            HarnessError: Naming the setting at fault.
        """
        from harness.retrieval.devices import PRECISIONS

        if not is_auto(self.backend):
            runtime(self.backend)  # an unknown name is refused, naming the backends there are
        if self.precision not in PRECISIONS:
            raise HarnessError(f"unknown precision {self.precision!r}; use one of {', '.join(PRECISIONS)}")
        if self.batch_size <= 0:
            raise HarnessError(f"batch_size must be positive, got {self.batch_size}")
        if self.max_seq_length is not None and self.max_seq_length <= 0:
            raise HarnessError(f"max_seq_length must be positive, got {self.max_seq_length}")

    def to_config(self) -> dict[str, Any]:
        """The decisive settings, by name (the configuration and the model-files key read these)."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self) if spec.metadata.get("decisive", True)}

    def load(
        self,
        model: str,
        device: str,
        cache_root: Path | None = None,
        calibration: Calibration | None = None,
        threads: int | None = None,
    ) -> Encoder:
        """Load `model` with these settings on `device` (an ONNX backend exports into `cache_root` once; a
        calibrated backend (`Runtime.calibrated`) quantizes on `calibration`). `threads` limits an ONNX
        Runtime or OpenVINO session's threads (None: the runtime's default, all cores); torch's own limit is
        process-wide and set by the pipeline.

        Raises:
            MissingDependencyError: sentence-transformers (or, for ONNX, onnxruntime) is not installed.
            ModelLoadError: The model cannot be found or loaded.
        """
        # Looked up on its module at each call: a test stands a fake model in for it there.
        encoder = encode.load_encoder(
            model,
            batch_size=self.batch_size,
            max_seq_length=self.max_seq_length,
            normalize=self.normalize,
            query_prefix=self.query_prefix,
            doc_prefix=self.doc_prefix,
            trust_remote_code=self.trust_remote_code,
            device=device,
            precision=self.precision,
        )
        return runtime(self.backend).wrap(encoder, cache_root, calibration, threads)
