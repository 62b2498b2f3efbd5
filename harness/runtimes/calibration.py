"""The sample a calibrated runtime (`harness.runtimes.registry.Runtime.calibrated`) measures its activation
ranges on: a seeded sample of the corpus being evaluated, with the identity its cache keys read."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


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
        return {
            "corpus_sha256": self.corpus_sha256,
            "requested": self.requested,
            "drawn": len(self.texts),
            "seed": self.seed,
            "texts_sha256": digest.hexdigest(),
        }
