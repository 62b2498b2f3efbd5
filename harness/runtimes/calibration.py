"""The sample a static-int8 runtime measures its activation ranges on, with the identity its cache keys read.

A bi-encoder's model (``--backend openvino-int8``) is calibrated on the shipped sample (`shipped_calibration`:
``harness/data/calibration-sample.txt``, text the project wrote itself, docs/dependencies.md), so it is prepared once
per machine and no corpus refits it; a learned sparse encoder's on a seeded sample of the corpus it encodes, a
cross-encoder's on a seeded sample of the (query, document) pairs being reranked (`pair_calibration`).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PAIR_CALIBRATION_TEXTS = 300  # as many pairs as a corpus gives texts (`openvino_backend.CALIBRATION_TEXTS`)
SHIPPED_SAMPLE = "data/calibration-sample.txt"  # under the package: one text a line
# Each line alone (questions, titles, paragraphs: 5 to 140 tokens), then every GROUP consecutive lines joined as one
# text (the long inputs a corpus's documents are, up to the truncation): the ranges see short and long texts.
GROUP = 4


@dataclass(frozen=True)
class Calibration:
    """The texts a calibrated backend measures its activation ranges on: a seeded sample of the corpus.

    Attributes:
        texts: The sampled document texts, in corpus order; or (query, document) pairs, in the order reranked.
        corpus_sha256: The corpus they were drawn from.
        requested: How many texts were asked for (a smaller corpus gives all its documents).
        seed: The sampling seed.
        sample: Where the texts come from when not from the corpus: the shipped sample's path in the package.
    """

    texts: tuple[Any, ...]
    corpus_sha256: str
    requested: int
    seed: int
    sample: str | None = None

    def identity(self) -> dict[str, Any]:
        """What the cache key and the result record of the sample: where from, how drawn, its hash."""
        digest = hashlib.sha256()
        for text in self.texts:
            text = text if isinstance(text, str) else json.dumps(list(text), ensure_ascii=False)  # a pair
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
        drawn = {"drawn": len(self.texts), "texts_sha256": digest.hexdigest()}
        if self.sample is not None:  # the shipped file: its path, its sha256 (as corpus_sha256), how it is cut
            return {"sample": self.sample, "sample_sha256": self.corpus_sha256, "group": GROUP, **drawn}
        return {"corpus_sha256": self.corpus_sha256, "requested": self.requested, "seed": self.seed, **drawn}


def shipped_calibration() -> Calibration:
    """The shipped sample (`SHIPPED_SAMPLE`): its lines, then each `GROUP` consecutive lines joined. Its identity
    names the file and its sha256, which every int8 model key and result record read."""
    text = importlib.resources.files("harness").joinpath(SHIPPED_SAMPLE).read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    texts = lines + [" ".join(lines[start : start + GROUP]) for start in range(0, len(lines), GROUP)]
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Calibration(tuple(texts), digest, len(texts), 0, sample=f"harness/{SHIPPED_SAMPLE}")


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
