"""Encoders: turn queries and documents into vectors, and a corpus into chunks of them.

The `Encoder` protocol is what the pipeline needs from a model; `load_encoder` loads one by name (the hashing
stand-in for ``hash:DIM``, else a sentence-transformers model: `harness.retrieval.sentence_transformer`, whose names
come from `harness.retrieval.models`); `LazyEncoder` stands in for a model whose vectors are all cached (both
stand-ins are in `harness.retrieval.stand_ins`);
`encode_corpus` encodes a document stream chunk by chunk, length-sorted or by token budget, checkpointing by time.

torch and sentence-transformers are imported only when a model loads.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harness.errors import HarnessError
from harness.records import Doc, doc_text
from harness.retrieval.devices import DeviceOutOfMemory, is_out_of_memory

# Importable from here as well: the Python API and the GPU benchmark read them here.
from harness.retrieval.models import DEFAULT_MODEL, canonical_model_name, resolve_model_source  # noqa: F401
from harness.retrieval.sentence_transformer import SentenceTransformerEncoder, load_sentence_transformer

# The stand-ins are importable from here as well, where the pipeline and the tests read them.
from harness.retrieval.stand_ins import HASH_PREFIX, HashingEncoder, LazyEncoder, hashing_encoder  # noqa: F401

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)


@runtime_checkable
class Encoder(Protocol):
    """What the pipeline needs from a model. Vectors are float32, one row per input.

    Attributes:
        name: The model name a result records.
        max_seq_length: Truncation length in tokens (None: the model's own, or none).
        normalize: Whether vectors are L2-normalized (cosine similarity).
        dimension: The vector size, when known before encoding (None otherwise).
        device: Where the model runs (``cpu``, ``cuda:0``); None for an encoder with no device.
    """

    name: str
    max_seq_length: int | None
    normalize: bool

    @property
    def dimension(self) -> int | None: ...

    @property
    def device(self) -> str | None: ...

    def fingerprint(self) -> dict[str, Any] | None:
        """The identity of the vectors this encoder makes (weights, settings), the embedding cache's key;
        None for an encoder without a stable identity, whose vectors are then never cached."""

    def settings(self) -> dict[str, Any]:
        """How texts become vectors, as a result's config records it."""

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray: ...


def load_encoder(
    name: str = DEFAULT_MODEL,
    batch_size: int = 32,
    max_seq_length: int | None = None,
    device: str = "cpu",
    normalize: bool = True,
    query_prefix: str = "",
    doc_prefix: str = "",
    trust_remote_code: bool = False,
    precision: str = "fp32",
) -> SentenceTransformerEncoder | HashingEncoder:
    """Load a model by name: the hashing stand-in for ``hash:DIM`` (`HashingEncoder`), else a sentence-transformers
    model (`harness.retrieval.sentence_transformer.load_sentence_transformer`, whose arguments these are).

    Raises:
        MissingDependencyError: sentence-transformers is not installed.
        ModelLoadError: The model cannot be found or loaded.
    """
    if name.startswith(HASH_PREFIX):
        return hashing_encoder(name, batch_size, normalize)
    return load_sentence_transformer(
        name,
        batch_size=batch_size,
        max_seq_length=max_seq_length,
        device=device,
        normalize=normalize,
        query_prefix=query_prefix,
        doc_prefix=doc_prefix,
        trust_remote_code=trust_remote_code,
        precision=precision,
    )


DEFAULT_CHECKPOINT_SECONDS = 60.0


class ChunkStore(Protocol):
    """Where encoded chunks are kept (the embedding cache entry), as `encode_corpus` sees it."""

    def stored(self, index: int, doc_ids: list[str]) -> tuple[list[str], np.ndarray] | None:
        """What is already stored of chunk `index`: the whole chunk, checkpointed pieces of it, or None."""

    def write_piece(self, index: int, name: str, doc_ids: list[str], vectors: np.ndarray) -> None:
        """Store part of chunk `index` (a checkpoint): `doc_ids` with their vectors, under `name`."""


def encode_corpus(
    encoder: Encoder,
    docs: Iterator[Doc],
    chunk_size: int = 16384,
    batch_size: int = 32,
    progress: bool = True,
    store: ChunkStore | None = None,
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
    token_budget: int | None = None,
    texts: TextStore | None = None,
    counts: dict[str, int] | None = None,
) -> Iterator[tuple[list[str], np.ndarray, float]]:
    """Encode a document stream chunk by chunk, checkpointing by time inside a chunk.

    Within each chunk, texts are encoded longest first in batches of `batch_size` (as
    sentence-transformers does within one call), so batches hold texts of similar length and
    little padding is computed; vectors are put back in input order. Only one chunk of texts
    is in memory at a time.

    The batches of a chunk depend only on its documents and `batch_size`, never on timing: so
    whatever was checkpointed, resuming re-encodes exactly the missing batches and the chunk's
    vectors are the ones an uninterrupted run computes, bit for bit.

    Args:
        encoder: The model.
        docs: The document stream (e.g. `harness.io.formats.iter_corpus`).
        chunk_size: Documents read and encoded per chunk (the caller stores each whole chunk).
        batch_size: Texts per forward pass.
        progress: Show a tqdm bar (documents, rate, ETA, how many are stored) on stderr.
        store: Where earlier runs stored chunks or pieces (reused instead of encoding), and where
            a piece is written whenever `checkpoint_seconds` of encoding have passed since the
            last chunk or piece was stored.
        checkpoint_seconds: The most encoding time a kill can lose inside a chunk (0: a piece
            after every batch).
        token_budget: Batch by tokens instead of by count (see `plan_batches`).
        texts: The vectors cached by text (`harness.io.cache.texts.TextStore`): a chunk encodes only the texts
            it lacks (each once), and what it encodes goes into it, checkpoints included.
        counts: Incremented with ``encoded`` (texts sent to the encoder) and ``cached`` (the rest).

    Yields:
        (doc_ids, vectors, seconds spent in the encoder) per chunk, in corpus order; the seconds
        are 0 for a chunk that was stored whole already.
    """
    from tqdm.auto import tqdm

    bar = tqdm(desc="encoding corpus", unit="doc", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    progress_state = _Progress(bar)
    try:
        for index, chunk in enumerate(chunked(docs, chunk_size)):
            doc_ids = [doc.doc_id for doc in chunk]
            stored = store.stored(index, doc_ids) if store is not None else None
            if stored is not None and stored[0] == doc_ids:
                progress_state.advance(len(doc_ids), stored=True)
                yield doc_ids, stored[1], 0.0
            else:

                def encode(ids: list[str], chunk_texts: list[str], pieces: ChunkStore | None = store):
                    return _encode_chunk(
                        encoder,
                        index,
                        ids,
                        chunk_texts,
                        batch_size,
                        stored,
                        pieces,
                        checkpoint_seconds,
                        progress_state,
                        token_budget,
                    )

                chunk_texts = [doc_text(doc) for doc in chunk]
                if texts is None:
                    vectors, seconds = encode(doc_ids, chunk_texts)
                else:
                    vectors, seconds = _encode_by_text(
                        texts, encode, store, doc_ids, chunk_texts, encoder, progress_state
                    )
                yield doc_ids, vectors, seconds
            progress_state.chunk_stored(len(doc_ids))  # the caller has stored the chunk by now
        if texts is not None and hasattr(texts, "compact"):
            texts.compact()  # the segments of every chunk and checkpoint, merged: one per run
    finally:
        bar.close()
        if counts is not None:
            counts["encoded"] = counts.get("encoded", 0) + progress_state.encoded
            counts["cached"] = counts.get("cached", 0) + progress_state.reused


class TextStore(Protocol):
    """Vectors found by their text (`harness.io.cache.texts.TextStore`), as `encode_corpus` sees it."""

    def lookup(self, texts: Sequence[str], dimension: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """(The rows of `texts` it holds, their vectors; None when it holds none)."""

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store the vectors of `texts`."""


class _Checkpoints:
    """A chunk's checkpoints go to its pieces and to the text store; remembers which texts are stored."""

    def __init__(self, store: ChunkStore | None, texts: TextStore, text_of: dict[str, str]):
        self.store, self.texts, self.text_of, self.written = store, texts, text_of, set()

    def write_piece(self, index: int, name: str, doc_ids: list[str], vectors: np.ndarray) -> None:
        if self.store is not None:
            self.store.write_piece(index, name, doc_ids, vectors)
        self.texts.add([self.text_of[doc_id] for doc_id in doc_ids], vectors)
        self.written.update(doc_ids)


def _encode_by_text(
    texts: TextStore,
    encode,
    store: ChunkStore | None,
    doc_ids: list[str],
    chunk_texts: list[str],
    encoder: Encoder,
    progress: _Progress,
) -> tuple[np.ndarray, float]:
    """One chunk's vectors: those of texts the store holds from it, the others encoded (a text repeated in the
    chunk once) with `encode` (`_encode_chunk` on that subset) and stored, checkpoints included."""
    import numpy as np

    rows, cached = texts.lookup(chunk_texts, encoder.dimension)
    progress.advance(len(rows), stored=True)
    if len(rows):  # a run resumed: its checkpoints are the texts it stored
        logger.info("%d of the chunk's %d documents found in the store by text", len(rows), len(chunk_texts))
    missing = np.setdiff1d(np.arange(len(chunk_texts)), rows).tolist()
    first: dict[str, int] = {}  # each missing text → its first row
    for row in missing:
        first.setdefault(chunk_texts[row], row)
    todo, ids = list(first), [doc_ids[row] for row in first.values()]
    fresh, seconds = None, 0.0
    if todo:
        checkpoints = _Checkpoints(store, texts, dict(zip(ids, todo)))
        fresh, seconds = encode(ids, todo, checkpoints)
        unstored = [n for n, doc_id in enumerate(ids) if doc_id not in checkpoints.written]
        texts.add([todo[n] for n in unstored], fresh[unstored])
        progress.advance(len(missing) - len(todo), stored=True)  # the repeats of a text just encoded
        if cached is not None and cached.shape[1] != fresh.shape[1]:  # a model whose dimension was not known
            logger.warning(
                "cached vectors of dimension %d, the model's is %d: encoding them again",
                *cached.shape[1:],
                fresh.shape[1],
            )
            again = [chunk_texts[row] for row in rows.tolist()]
            cached, more = encode([doc_ids[row] for row in rows.tolist()], again, None)
            texts.add(again, cached)
            seconds += more
    vectors = np.empty((len(chunk_texts), (fresh if fresh is not None else cached).shape[1]), dtype=np.float32)
    if cached is not None:
        vectors[rows] = cached
    if fresh is not None:
        position = {text: n for n, text in enumerate(todo)}
        vectors[missing] = fresh[[position[chunk_texts[row]] for row in missing]]
    return vectors, seconds


class _Progress:
    """The bar: documents encoded or reused, and (as ``stored=``) how many are safe in the store."""

    def __init__(self, bar):
        self.bar, self.stored, self.in_chunk = bar, 0, 0
        self.encoded = self.reused = 0  # documents encoded here, and those whose vectors were stored already

    def advance(self, count: int, stored: bool = False) -> None:
        """`count` more documents have vectors; `stored` when they came from the store."""
        self.bar.update(count)
        if stored:
            self.reused += count
            self.checkpointed(count)
        else:
            self.encoded += count

    def checkpointed(self, count: int) -> None:
        """`count` more documents of the current chunk are stored (as pieces)."""
        self.in_chunk += count
        self.bar.set_postfix(stored=self.stored + self.in_chunk, refresh=False)

    def chunk_stored(self, count: int) -> None:
        """The current chunk (`count` documents) is stored whole; its pieces are part of it."""
        self.stored, self.in_chunk = self.stored + count, 0
        self.bar.set_postfix(stored=self.stored, refresh=False)


def plan_batches(
    encoder: Encoder, texts: Sequence[str], batch_size: int, token_budget: int | None = None
) -> list[list[int]]:
    """The batches of one chunk: longest texts first, so a batch holds texts of similar length.

    With `token_budget`, a batch holds as many texts as fit ``texts × longest text's tokens ≤
    budget`` (long texts in small batches, short ones in large: on a GPU the work per batch stays
    even); token counts come from the model's tokenizer. Otherwise batches hold `batch_size` texts,
    ordered by character length (as sentence-transformers orders them). The plan depends only on
    the texts and these settings, never on timing.
    """
    if token_budget is None or not hasattr(encoder, "token_lengths"):
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    lengths = encoder.token_lengths(texts)
    order = sorted(range(len(texts)), key=lambda i: (-lengths[i], i))
    batches, start = [], 0
    while start < len(order):
        size = max(1, token_budget // max(1, lengths[order[start]]))
        batches.append(order[start : start + size])
        start += size
    return batches


def _encoded(encoder: Encoder, batches: list[list[str]]) -> Iterator[np.ndarray]:
    """Vectors of each batch in order; pipelined (next batch prepared while this one runs) when the encoder can."""
    if getattr(encoder, "pipelined", False):
        yield from encoder.encode_doc_batches(batches)
    else:
        for texts in batches:
            yield encoder.encode_docs(texts)


def _encode_chunk(
    encoder: Encoder,
    index: int,
    doc_ids: list[str],
    texts: list[str],
    batch_size: int,
    stored: tuple[list[str], np.ndarray] | None,
    store: ChunkStore | None,
    checkpoint_seconds: float,
    progress: _Progress,
    token_budget: int | None = None,
) -> tuple[np.ndarray, float]:
    """One chunk's vectors in input order, reusing stored pieces and checkpointing by time.

    Whatever interrupts the chunk (Ctrl-C, a GPU out of memory), the batches encoded since the last
    checkpoint are stored first, so the rerun does not redo them.
    """
    import numpy as np

    batches = plan_batches(encoder, texts, batch_size, token_budget)
    number = 0
    known = {doc_id: row for row, doc_id in enumerate(stored[0])} if stored else {}
    reused = [bool(known) and all(doc_ids[i] in known for i in batch) for batch in batches]
    fresh = _encoded(encoder, [[texts[i] for i in batch] for batch, done in zip(batches, reused) if not done])
    vectors: np.ndarray | None = None
    pending: list[int] = []  # batches encoded since the last checkpoint
    seconds, last_write = 0.0, time.perf_counter()
    size_tag = f"t{token_budget}" if token_budget else f"b{batch_size}"

    def checkpoint() -> None:
        nonlocal pending, last_write
        rows = [i for b in pending for i in batches[b]]
        # Named by its batches: two runs writing the same piece write the same bytes.
        name = f"{size_tag}-" + hashlib.sha256(repr(pending).encode()).hexdigest()[:12]
        store.write_piece(index, name, [doc_ids[i] for i in rows], vectors[rows])
        progress.checkpointed(len(rows))
        logger.debug("checkpoint: chunk %d, %d documents stored in all", index, progress.stored + progress.in_chunk)
        pending, last_write = [], time.perf_counter()

    try:
        for number, batch in enumerate(batches):
            if reused[number]:
                block = stored[1][[known[doc_ids[i]] for i in batch]]
                progress.advance(len(batch), stored=True)
            else:
                started = time.perf_counter()
                block = next(fresh)
                seconds += time.perf_counter() - started
                _check_finite(block, index, number, len(batches), doc_ids[batch[0]], encoder)
                pending.append(number)
                progress.advance(len(batch))
            if vectors is None:
                vectors = np.empty((len(texts), block.shape[1]), dtype=np.float32)
            vectors[batch] = block
            last = number == len(batches) - 1
            if store is not None and pending and not last and time.perf_counter() - last_write >= checkpoint_seconds:
                checkpoint()
    except BaseException as exc:
        if store is not None and pending and vectors is not None:
            checkpoint()  # keep what this chunk already encoded
        if is_out_of_memory(exc):
            # A pipelined encoder knows which batch failed (it runs one ahead); otherwise it is this one.
            size = exc.texts if isinstance(exc, DeviceOutOfMemory) else len(batches[number])
            stored_docs = progress.stored + progress.in_chunk
            raise HarnessError(
                f"the device ran out of memory on a batch of {size} texts (chunk {index}); "
                f"{stored_docs} documents are stored and a rerun resumes from them; "
                f"retry with a smaller batch_size (--batch-size {max(1, size // 2)})"
                + (f" or token_budget (--token-budget {max(1, token_budget // 2)})" if token_budget else "")
            ) from None
        raise
    return vectors, seconds


class NonFiniteVectors(HarnessError):
    """An encoder returned NaN or infinite values (an fp16 overflow, typically); nothing of it is stored."""


def _check_finite(block: np.ndarray, chunk: int, batch: int, batches: int, first_doc_id: str, encoder: Encoder) -> None:
    """Refuse a batch with a NaN or an infinity before it can reach the cache."""
    import numpy as np

    if np.isfinite(block).all():
        return
    bad = int(block.shape[0] - np.isfinite(block).all(axis=1).sum())
    raise NonFiniteVectors(
        f"the model returned non-finite vectors (NaN or inf) for {bad} of {len(block)} texts in "
        f"batch {batch + 1} of {batches}, chunk {chunk} (first document {first_doc_id!r}); that "
        f"batch is not stored; {_precision_hint(encoder)}"
    )


def check_finite_queries(vectors: np.ndarray, query_ids: list[str], encoder: Encoder) -> None:
    """Refuse query vectors with a NaN or an infinity before they are searched with or cached.

    Raises:
        NonFiniteVectors: Naming how many queries, the first of them, and the precision to use instead.
    """
    import numpy as np

    finite = np.isfinite(vectors).all(axis=1)
    if finite.all():
        return
    bad = [query_id for query_id, ok in zip(query_ids, finite.tolist()) if not ok]
    raise NonFiniteVectors(
        f"the model returned non-finite vectors (NaN or inf) for {len(bad)} of {len(query_ids)} "
        f"queries (first {bad[0]!r}); none is stored; {_precision_hint(encoder)}"
    )


def _precision_hint(encoder: Encoder) -> str:
    if getattr(encoder, "precision", None) == "fp16":
        return "fp16 overflows easily: use --precision bf16 (same range as fp32) or fp32"
    return "use --precision fp32 (or bf16)"


def chunked(docs: Iterator[Doc], size: int) -> Iterator[list[Doc]]:
    """The stream in lists of `size` documents (the last one shorter); one list in memory at a time."""
    chunk: list[Doc] = []
    for doc in docs:
        chunk.append(doc)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
