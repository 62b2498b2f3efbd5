"""The encoders that stand in for a model: the hashing bag of words (``hash:DIM``), which measures the harness and
imports no torch, and `LazyEncoder`, which knows a model's fingerprint and settings from an earlier run and loads
the model only when something must actually be encoded (a run whose vectors are all cached never does).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.errors import ModelLoadError

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)


HASH_PREFIX = "hash:"


@dataclass
class HashingEncoder:
    """A deterministic stand-in encoder for tests and scale benchmarks: hashed bag of words.

    ``--model hash:DIM`` (optionally ``hash:DIM:DELAY``, seconds slept per batch, to make a run
    slow enough to interrupt in tests). Each lowercased word adds 1 to bucket ``sha256(word) mod
    DIM``; vectors are L2-normalized. It measures the harness, not a model: no torch is imported.
    """

    dimension: int
    delay: float = 0.0
    normalize: bool = True
    batch_size: int = 32
    max_seq_length: int | None = None

    @property
    def name(self) -> str:
        return f"{HASH_PREFIX}{self.dimension}"

    @property
    def device(self) -> str:
        return "cpu"

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "scheme": "sha256-bag-of-words-v1", **self.settings()}

    def settings(self) -> dict[str, Any]:
        return {"backend": "hashing", "dimension": self.dimension, "normalize": self.normalize}

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if self.delay:
            time.sleep(self.delay)
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                digest = hashlib.sha256(word.encode("utf-8")).digest()
                vectors[row, int.from_bytes(digest[:8], "little") % self.dimension] += 1.0
        if self.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.where(norms == 0, 1.0, norms)
        return vectors

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)


def hashing_encoder(name: str, batch_size: int, normalize: bool) -> HashingEncoder:
    """The hashing encoder a ``hash:DIM`` or ``hash:DIM:DELAY`` model name asks for.

    Raises:
        ModelLoadError: The name is neither form (or its dimension or delay is out of range).
    """
    parts = name[len(HASH_PREFIX) :].split(":")
    try:
        dimension = int(parts[0])
        delay = float(parts[1]) if len(parts) > 1 else 0.0
    except ValueError:
        dimension, delay = 0, 0.0
    if dimension < 1 or delay < 0 or len(parts) > 2:
        raise ModelLoadError(
            f"cannot load model {name!r}: the hashing encoder is hash:DIM or hash:DIM:DELAY, e.g. hash:256"
        )
    return HashingEncoder(dimension, delay, normalize, batch_size)


class LazyEncoder:
    """An encoder that loads its model only when something must actually be encoded.

    It knows the model's fingerprint and settings from an earlier run (see
    `harness.io.cache.recall_fingerprint`), which is all a run needs when every embedding it wants is
    cached: such a run never imports torch or loads the weights.
    """

    def __init__(
        self,
        fingerprint: dict[str, Any],
        load: Callable[[], Any],
        dimension: int | None = None,
        device: str | None = None,
    ):
        self._fingerprint = fingerprint
        self._device = device  # where the remembered model ran (what its cached vectors came from)
        self._load = load
        self._dimension = dimension
        self._encoder: Any = None
        self.name = fingerprint["name"]
        self.normalize = fingerprint["normalize"]
        self.max_seq_length = fingerprint.get("max_seq_length")
        self.batch_size = fingerprint.get("batch_size", 32)

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def _real(self) -> Any:
        if self._encoder is None:
            logger.info("loading the model: some embeddings are not cached")
            self._encoder = self._load()
            if self._encoder.fingerprint() != self._fingerprint:
                logger.warning("the model's files changed since its fingerprint was remembered; using the new one")
        return self._encoder

    @property
    def dimension(self) -> int | None:
        return self._dimension if self._encoder is None else self._encoder.dimension

    @property
    def device(self) -> str | None:
        return self._device if self._encoder is None else self._encoder.device

    def fingerprint(self) -> dict[str, Any]:
        return self._fingerprint if self._encoder is None else self._encoder.fingerprint()

    @property
    def preparation(self) -> dict[str, Any] | None:
        """What preparing the loaded model cost (an OpenVINO encoder's record), None before it loads."""
        return getattr(self._encoder, "preparation", None)

    def settings(self) -> dict[str, Any]:
        keys = (
            "backend",
            "max_seq_length",
            "normalize",
            "query_prefix",
            "doc_prefix",
            "query_prompt",
            "doc_prompt",
            "inference_precision",
            "quantization",
            "calibration",
        )
        source = self._fingerprint if self._encoder is None else self._encoder.settings()
        return {key: source.get(key) for key in keys if key in source}

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._real().encode_queries(texts)

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._real().encode_docs(texts)

    @property
    def pipelined(self) -> bool:
        return getattr(self._real(), "pipelined", False)

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return self._real().token_lengths(texts)

    def encode_doc_batches(self, batches: Sequence[Sequence[str]]) -> Iterator[np.ndarray]:
        return self._real().encode_doc_batches(batches)
