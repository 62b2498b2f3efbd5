"""What a deployment stores: Matryoshka truncation and int8/uint8/binary embeddings, derived from float32 vectors.

Every variant is derived from the float32 vectors the embedding cache already holds: nothing is encoded
again and no new cache entry is made for the model's output. The rules:

* **Truncation** (``truncate_dim`` D): keep the first D dimensions, then, for a model whose similarity
  is cosine, normalize again — what sentence-transformers' ``truncate_dim`` with normalized embeddings
  gives. D equal to the model's dimension is no truncation (the result is today's, bit for bit).
* **int8 / uint8**: per-dimension ranges (min, max) computed on the **corpus** embeddings only — every
  document vector, streamed chunk by chunk — and stored beside the derived index; queries are quantized
  with those ranges, never their own. The formula is sentence-transformers' ``quantize_embeddings``:
  ``clip(floor((x - min) / ((max - min) / 255)), 0, 255)``, minus 128 for int8. The index is FAISS's
  ``IndexScalarQuantizer`` with ``QT_8bit_direct_signed`` (int8) or ``QT_8bit_direct`` (uint8): it stores
  the codes as they are (one byte per dimension) and scores the inner product of the query's codes and
  the document's codes, exactly (integers below 2^24 are exact in float32).
* **binary / ubinary**: one bit per dimension, ``x > 0``, packed 8 to a byte (binary stores the bytes
  minus 128 as int8, ubinary as uint8: the same bits, so the same ranking). The index is FAISS's
  ``IndexBinaryFlat`` (Hamming distance); a document's score is the number of bits it shares with the
  query (dimension − Hamming distance), so higher is better as everywhere else.
* **Rescoring** (``rescore_multiplier`` M, default 2 as sentence-transformers' ``semantic_search_faiss``):
  the compressed index retrieves M × depth candidates, which are then scored by the float32 query against
  the **float32** document vectors (truncated as the index is) and cut to the depth — the candidates'
  best possible order; a deployment that keeps only int8 vectors on disk for rescoring loses a little
  more. M = 0 keeps the raw compressed ranking, in which documents tied at the cut are all considered,
  so the trec_eval order (score, then doc_id, descending) decides which stay.
"""

from __future__ import annotations

import hashlib
import logging
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError, setting
from harness.records import Run
from harness.retrieval.index import DocIds, RowIndex, exact_knn

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
DEFAULT_RESCORE_MULTIPLIER = 2  # sentence-transformers' semantic_search_faiss


class CompressionError(HarnessError):
    """A truncation or precision that cannot apply to this model or index."""


@dataclass(frozen=True)
class CompressionSpec:
    """How the stored vectors are compressed (recorded in every result's config and label).

    Attributes:
        truncate_dim: Keep the first D dimensions (Matryoshka); None keeps all.
        embedding_precision: One of `PRECISIONS`.
        rescore_multiplier: For a compressed precision: retrieve this many × depth candidates, rescore them
            with float32 vectors; 0 keeps the raw compressed ranking.
    """

    truncate_dim: int | None = None
    embedding_precision: str = "float32"
    rescore_multiplier: int = DEFAULT_RESCORE_MULTIPLIER

    @property
    def compressed(self) -> bool:
        """True for a precision other than float32 (a quantized index)."""
        return self.embedding_precision != "float32"

    @property
    def binary(self) -> bool:
        return self.embedding_precision in ("binary", "ubinary")

    def check(self, dimension: int | None = None) -> None:
        """Validate the settings (and, given the model's dimension, the truncation and the bit packing).

        Raises:
            CompressionError: An unknown precision, a dimension ≤ 0 or above the model's, a negative
                multiplier, or binary packing of a dimension that is not a multiple of 8.
        """
        if self.embedding_precision not in PRECISIONS:
            raise CompressionError(
                f"unknown {setting('embedding_precision')} {self.embedding_precision!r}; "
                f"use one of {', '.join(PRECISIONS)}"
            )
        if self.truncate_dim is not None and self.truncate_dim <= 0:
            raise CompressionError(f"{setting('truncate_dim')} {self.truncate_dim} must be positive")
        if self.rescore_multiplier < 0:
            raise CompressionError(
                f"{setting('rescore_multiplier')} {self.rescore_multiplier} must be 0 (no rescoring) or more"
            )
        if dimension is None:
            return
        if self.truncate_dim is not None and self.truncate_dim > dimension:
            raise CompressionError(
                f"{setting('truncate_dim')} {self.truncate_dim} exceeds the model's dimension {dimension}"
            )
        kept = self.truncate_dim or dimension
        if self.binary and kept % 8:
            raise CompressionError(
                f"{setting('embedding_precision')} {self.embedding_precision} packs 8 dimensions "
                f"a byte, and {kept} is not a multiple of 8 (choose {setting('truncate_dim')} "
                f"{kept - kept % 8 or 8})"
            )

    def effective(self, dimension: int) -> CompressionSpec:
        """The same spec with a truncation to the full dimension dropped (it changes nothing)."""
        if self.truncate_dim == dimension:
            return CompressionSpec(None, self.embedding_precision, self.rescore_multiplier)
        return self

    def to_config(self) -> dict[str, Any]:
        """The decisive settings (the multiplier only where a compressed index uses it)."""
        config: dict[str, Any] = {"truncate_dim": self.truncate_dim, "embedding_precision": self.embedding_precision}
        if self.compressed:
            config["rescore_multiplier"] = self.rescore_multiplier
        return config

    def label(self) -> str:
        """The short name a grid shows: ``dim256 int8 rescore2`` (empty for the default)."""
        tokens = [f"dim{self.truncate_dim}"] if self.truncate_dim is not None else []
        if self.compressed:
            tokens += [
                self.embedding_precision,
                f"rescore{self.rescore_multiplier}" if self.rescore_multiplier else "no-rescore",
            ]
        return " ".join(tokens)

    def prepare(self, vectors: np.ndarray, normalize: bool) -> np.ndarray:
        """Float32 vectors as this spec stores them before quantization: truncated (and renormalized)."""
        if self.truncate_dim is None:
            return vectors
        return truncate(vectors, self.truncate_dim, normalize)


def compression_grid(
    base: CompressionSpec,
    truncate_dims: Sequence[int | None] = (),
    precisions: Sequence[str] = (),
    multipliers: Sequence[int] = (),
) -> list[CompressionSpec]:
    """Every dimension × precision × multiplier (an empty axis keeps `base`'s value); the multiplier axis
    applies to compressed precisions only, so float32 appears once per dimension.

    Raises:
        CompressionError: A value of an axis is invalid (checked as `CompressionSpec.check` does).
    """
    specs = []
    for dimension in truncate_dims or (base.truncate_dim,):
        for precision in precisions or (base.embedding_precision,):
            for multiplier in (
                (multipliers or (base.rescore_multiplier,)) if precision != "float32" else (base.rescore_multiplier,)
            ):
                spec = CompressionSpec(dimension, precision, multiplier)
                spec.check()
                specs.append(spec)
    return list(dict.fromkeys(specs))


def truncate(vectors: np.ndarray, dimension: int, normalize: bool) -> np.ndarray:
    """The first `dimension` columns, each row scaled to unit length when `normalize` (zero rows stay zero).

    ``x[:D] / ‖x[:D]‖₂`` — Matryoshka truncation for a cosine model.
    """
    import numpy as np

    kept = np.array(vectors[:, :dimension], dtype=np.float32)
    if normalize:
        norms = np.linalg.norm(kept, axis=1, keepdims=True)
        kept /= np.where(norms == 0, 1, norms)
    return kept


# --------------------------------------------------------------------------- calibration and quantization


@dataclass(frozen=True)
class Calibration:
    """Per-dimension int8/uint8 ranges: ``ranges[0]`` the minima, ``ranges[1]`` the maxima, over `n` vectors."""

    ranges: np.ndarray
    n: int

    @classmethod
    def of(cls, chunks: Iterable[np.ndarray]) -> Calibration:
        """The ranges of every vector of `chunks` (the corpus), streamed: no concatenated copy."""
        import numpy as np

        low = high = None
        n = 0
        for chunk in chunks:
            if not len(chunk):
                continue
            chunk_low, chunk_high = chunk.min(axis=0), chunk.max(axis=0)
            low = chunk_low if low is None else np.minimum(low, chunk_low)
            high = chunk_high if high is None else np.maximum(high, chunk_high)
            n += len(chunk)
        if low is None:
            raise CompressionError("cannot calibrate int8 ranges on an empty corpus")
        return cls(np.vstack([low, high]).astype(np.float32), n)

    def _digest(self) -> str:
        return hashlib.sha256(self.ranges.tobytes() + str(self.n).encode()).hexdigest()

    def save(self, path: Path) -> None:
        """Write the ranges atomically, with a checksum that `load` verifies."""
        import io

        import numpy as np

        from harness.io.files import atomic_writer

        buffer = io.BytesIO()
        np.savez(buffer, ranges=self.ranges, n=np.int64(self.n), sha256=np.array(self._digest()))
        with atomic_writer(path, "wb") as handle:
            handle.write(buffer.getvalue())

    @classmethod
    def load(cls, path: Path, dimension: int) -> Calibration | None:
        """The stored ranges, or None (with a warning) when the file is absent, unreadable, of another
        dimension, or fails its checksum — the caller then recomputes them."""
        import numpy as np

        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                calibration = cls(np.asarray(data["ranges"], dtype=np.float32), int(data["n"]))
                stored = str(data["sha256"])
            if calibration.ranges.shape != (2, dimension) or stored != calibration._digest():
                raise ValueError(f"ranges of shape {calibration.ranges.shape} or a checksum that does not match")
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            logger.warning("damaged int8 calibration %s (%s): recomputing it from the corpus", path, exc)
            return None
        return calibration


def quantize(vectors: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """`vectors` in `precision` (sentence-transformers' ``quantize_embeddings`` formulas).

    int8/uint8 need `ranges` — the corpus's (`Calibration`), for documents and queries alike:
    ``q = clip(floor((x - min) / step), 0, 255)`` with ``step = (max - min) / 255`` (1 where max = min),
    minus 128 for int8. binary/ubinary: ``packbits(x > 0)``, minus 128 as int8 for binary.

    Not a call to ``quantize_embeddings`` itself: importing it imports torch and transformers (about 0.5 GB more
    peak memory and seconds), which a run whose vectors come from the cache, or from a model without torch
    (``hash:``, ``openai:``, ONNX, OpenVINO), never needs; `test_our_quantize_is_sentence_transformers_quantize_embeddings_bit_for_bit` holds
    the two equal, bit for bit.
    """
    import numpy as np

    if precision == "float32":
        return np.asarray(vectors, dtype=np.float32)
    if precision in ("int8", "uint8"):
        if ranges is None:
            raise ValueError("int8/uint8 quantization needs the corpus's ranges")
        starts = ranges[0]
        steps = (ranges[1] - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        codes = np.clip(np.floor((vectors - starts) / steps), 0, 255)
        return (codes - 128).astype(np.int8) if precision == "int8" else codes.astype(np.uint8)
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1)
        return (packed.astype(np.int16) - 128).astype(np.int8) if precision == "binary" else packed
    raise ValueError(f"unknown precision {precision!r}")


# --------------------------------------------------------------------------- the compressed index


class CompressedIndex(RowIndex):
    """An exact index over quantized vectors, plus the float32 vectors it was derived from (for rescoring
    and for measuring what the compression cost against exact float32 search).

    Vectors are added chunk by chunk (float32, already truncated); `build` calibrates (int8/uint8, on the
    corpus only), quantizes and fills the FAISS index.
    """

    def __init__(self, dimension: int, spec: CompressionSpec, calibration_file: Path | None = None):
        spec.check()
        if not spec.compressed:
            raise ValueError("a CompressedIndex needs a precision other than float32")
        self.spec, self.dimension, self.calibration_file = spec, dimension, calibration_file
        self._doc_ids = DocIds()
        self._chunks: list[np.ndarray] = []
        self._index: Any = None
        self.calibration: Calibration | None = None

    def add(self, doc_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Keep one chunk of float32 vectors (shape (len(doc_ids), dimension)) until `build`."""
        self._check_chunk(doc_ids, vectors)
        self._chunks.append(vectors)
        self._doc_ids.extend(doc_ids)
        self._index = None

    def build(self) -> None:
        """Calibrate (int8/uint8), quantize every chunk and add it to the FAISS index (no-op when built)."""
        if self._index is not None:
            return
        import faiss

        precision = self.spec.embedding_precision
        if not self._chunks:
            raise CompressionError("cannot build a compressed index over an empty corpus")
        if self.spec.binary:
            self._index = faiss.IndexBinaryFlat(self.dimension)
        else:
            self.calibration = self._calibrate()
            kind = (
                faiss.ScalarQuantizer.QT_8bit_direct_signed
                if precision == "int8"
                else faiss.ScalarQuantizer.QT_8bit_direct
            )
            self._index = faiss.IndexScalarQuantizer(self.dimension, kind, faiss.METRIC_INNER_PRODUCT)
        for chunk in self._chunks:
            self._index.add(self._codes(chunk))

    def _calibrate(self) -> Calibration:
        """The corpus's ranges: stored ones when valid, else computed from every document vector (and stored)."""
        if self.calibration_file is not None:
            stored = Calibration.load(self.calibration_file, self.dimension)
            if stored is not None and stored.n == len(self):
                logger.info("int8 ranges from %s (%d documents)", self.calibration_file, stored.n)
                return stored
        calibration = Calibration.of(self._chunks)
        logger.info("int8 ranges computed on all %d corpus vectors", calibration.n)
        if self.calibration_file is not None:
            try:
                calibration.save(self.calibration_file)
            except HarnessError as exc:
                logger.warning("could not store the int8 ranges (%s); continuing", exc)
        return calibration

    def _codes(self, vectors: np.ndarray) -> np.ndarray:
        """What the FAISS index takes: packed uint8 bits, or the int8/uint8 codes as float32 values."""
        import numpy as np

        precision = self.spec.embedding_precision
        if self.spec.binary:
            return np.packbits(vectors > 0, axis=-1)  # binary and ubinary share these bits
        ranges = self.calibration.ranges if self.calibration is not None else None
        return np.ascontiguousarray(quantize(vectors, precision, ranges), dtype=np.float32)

    def query_codes(self, vectors: np.ndarray) -> np.ndarray:
        """Queries quantized as the documents are: with the corpus's ranges, never their own."""
        self.build()
        return self._codes(vectors)

    def facts(self) -> dict[str, float]:
        """`RowIndex.facts` (bytes per document count the FAISS index only: the float32 vectors kept for
        rescoring lie on disk), plus how many corpus vectors the int8 ranges came from."""
        facts = super().facts()
        if self.calibration is not None:
            facts["calibration_docs"] = self.calibration.n
        return facts

    def search(self, query_ids: Sequence[str], vectors: np.ndarray, depth: int, name: str = "run") -> Run:
        """The `depth` best documents per query: rescored candidates, or the raw compressed ranking."""
        self.build()
        depth = min(depth, len(self))
        if depth <= 0 or len(query_ids) == 0:
            return Run.from_scores({query_id: {} for query_id in query_ids}, name=name)
        codes = self.query_codes(vectors)
        multiplier = self.spec.rescore_multiplier
        if multiplier:
            rows = self._raw_search(codes, min(len(self), depth * multiplier))[1]
            return self._rescore(query_ids, vectors, rows, name).truncated(depth)
        return self._ranked(query_ids, codes, depth, name)

    def _raw_search(self, codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the compressed index; binary distances turned into shared bits (higher is better)."""
        import numpy as np

        scores, rows = self._index.search(codes, k)
        if self.spec.binary:
            scores = self.dimension - scores.astype(np.int64)
        return scores, rows

    def _ranked(self, query_ids: Sequence[str], codes: np.ndarray, depth: int, name: str) -> Run:
        """The raw ranking with every document tied at the cut considered, so trec_eval's order decides."""
        k = depth
        while True:
            k = min(len(self), max(2 * k, depth + 1))
            scores, rows = self._raw_search(codes, k)
            # Ties reach past k where the k-th score still equals the depth-th: widen for all and retry.
            open_ties = (scores[:, depth - 1] == scores[:, k - 1]) & (rows[:, k - 1] >= 0)
            if k >= len(self) or not open_ties.any():
                break
        doc_ids = self._doc_ids
        results = {
            query_id: {doc_ids[row]: float(score) for row, score in zip(query_rows, query_scores) if row >= 0}
            for query_id, query_scores, query_rows in zip(query_ids, scores.tolist(), rows.tolist())
        }
        return Run.adopt(results, name=name).truncated(depth)

    def _rescore(self, query_ids: Sequence[str], vectors: np.ndarray, rows: np.ndarray, name: str) -> Run:
        """The candidates' float32 scores: the float32 query against the float32 document vectors."""
        import numpy as np

        valid = rows >= 0
        flat = np.where(valid, rows, 0).ravel()
        starts = np.cumsum([0] + [len(chunk) for chunk in self._chunks])
        which = np.searchsorted(starts, flat, side="right") - 1
        candidates = np.empty((len(flat), self.dimension), dtype=np.float32)
        for number, chunk in enumerate(self._chunks):  # one gather per chunk (they may be memory-mapped)
            mask = which == number
            candidates[mask] = chunk[flat[mask] - starts[number]]
        queries = np.asarray(vectors, dtype=np.float32)
        scores = np.einsum("qkd,qd->qk", candidates.reshape(*rows.shape, self.dimension), queries)
        doc_ids = self._doc_ids
        results = {
            query_id: {doc_ids[row]: score for row, score, ok in zip(query_rows, query_scores, query_valid) if ok}
            for query_id, query_rows, query_scores, query_valid in zip(
                query_ids, rows.tolist(), scores.tolist(), valid.tolist()
            )
        }
        return Run.adopt(results, name=name)

    def exact_search(self, query_ids: Sequence[str], vectors: np.ndarray, depth: int) -> Run:
        """Exact float32 search over the same (truncated) vectors: the reference the compression is measured by."""
        scores, rows = exact_knn(self._chunks, vectors, min(depth, len(self)))
        doc_ids = self._doc_ids
        return Run.adopt(
            {
                query_id: {doc_ids[row]: score for row, score in zip(r, s) if row >= 0}
                for query_id, s, r in zip(query_ids, scores.tolist(), rows.tolist())
            }
        )
