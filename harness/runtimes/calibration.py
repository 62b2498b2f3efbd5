"""The sample a calibrated runtime (`harness.runtimes.registry.Runtime.calibrated`) measures its activation
ranges on: a seeded sample of the corpus being evaluated (or, for a cross-encoder, of the (query, document) pairs
being reranked: `pair_calibration`), with the identity its cache keys read."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PAIR_CALIBRATION_TEXTS = 300  # as many pairs as a corpus gives texts (`openvino_backend.CALIBRATION_TEXTS`)


@dataclass(frozen=True)
class Calibration:
    """The texts a calibrated backend measures its activation ranges on: a seeded sample of the corpus.

    Attributes:
        texts: The sampled document texts, in corpus order; or (query, document) pairs, in the order reranked.
        corpus_sha256: The corpus they were drawn from.
        requested: How many texts were asked for (a smaller corpus gives all its documents).
        seed: The sampling seed.
    """

    texts: tuple[Any, ...]
    corpus_sha256: str
    requested: int
    seed: int

    def identity(self) -> dict[str, Any]:
        """What the cache key and the result record of the sample: where from, how drawn, its hash."""
        digest = hashlib.sha256()
        for text in self.texts:
            text = text if isinstance(text, str) else json.dumps(list(text), ensure_ascii=False)  # a pair
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
        return {
            "corpus_sha256": self.corpus_sha256,
            "requested": self.requested,
            "drawn": len(self.texts),
            "seed": self.seed,
            "texts_sha256": digest.hexdigest(),
        }


def pair_calibration(
    pairs: Sequence[tuple[str, str]], size: int = PAIR_CALIBRATION_TEXTS, seed: int = 0
) -> Calibration:
    """A seeded uniform sample of `size` of the (query, document) `pairs` being reranked (all when fewer), in their
    order; its source hash (``corpus_sha256``) is the sha256 of every pair, so another run's pairs draw anew."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(json.dumps(list(pair), ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\0")
    chosen = sorted(random.Random(seed).sample(range(len(pairs)), min(size, len(pairs))))
    return Calibration(tuple(tuple(pairs[i]) for i in chosen), digest.hexdigest(), size, seed)
