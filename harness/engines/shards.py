"""The worker side of the engines that fan a corpus out: encode a shard into the shared cache entry.

A shard is one chunk of the embedding cache (`harness.io.cache`). A worker — a Ray actor
(`harness.engines.ray_engine`) or a local process on one device (`harness.engines.multi_device`) — loads the model
once, checks that its weights are the driver's, and encodes each shard exactly as the local engine
encodes a chunk (`harness.retrieval.encode.encode_corpus`: same order, same batches, the same time-based
checkpoints), then writes it whole into the entry.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.io.cache import CacheCorrupt, EmbeddingEntry
from harness.io.cache.texts import text_digests
from harness.records import Doc, doc_text
from harness.retrieval.encode import DEFAULT_CHECKPOINT_SECONDS, Encoder, chunked, encode_corpus

if TYPE_CHECKING:
    import numpy as np


class ShardEncoder:
    """A Ray actor: loads the model once, then encodes shards into the cache entry.

    Args:
        load: Builds the encoder (a picklable callable, e.g. ``partial(load_model, config)``).
        entry: The cache entry the driver started; its folder must be visible on this node.
        fingerprint: The driver's model fingerprint; a worker whose model differs refuses to work.
    """

    def __init__(self, load: Callable[[], Encoder], entry: EmbeddingEntry, fingerprint: dict[str, Any]):
        self.host = socket.gethostname()
        self.entry = entry
        # Ray reports a constructor's exception without its cause; kept here, `ready` raises it whole.
        self.problem: HarnessError | None = None
        try:
            if not (entry.root / "key.json").is_file():
                raise HarnessError(
                    f"worker on {self.host} cannot see the cache entry {entry.root}: the cache "
                    "directory must be on a filesystem every Ray node mounts (set --cache-dir to such "
                    "a path)"
                )
            self.encoder = load()
            mine = self.encoder.fingerprint() if hasattr(self.encoder, "fingerprint") else None
            if _plain(mine) != _plain(fingerprint):
                raise HarnessError(
                    f"worker on {self.host} loaded a different model than the driver (fingerprints "
                    f"{mine} vs {fingerprint}); install the same model and versions on every node"
                )
        except HarnessError as exc:
            self.problem = exc

    def ready(self) -> str:
        """This worker's host name, the GPUs Ray assigned it and the device its model runs on (``host gpus [1]
        cuda:0``); raises what went wrong in the constructor."""
        if self.problem is not None:
            raise self.problem
        device = getattr(self.encoder, "device", None)
        return self.host + _ray_gpus() + (f" {device}" if device else "")

    def encode(
        self,
        index: int,
        docs: list[Doc],
        batch_size: int,
        checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
        token_budget: int | None = None,
    ) -> tuple[int, float]:
        """Encode one shard as the local engine encodes a chunk, and store it; returns (rows, seconds).

        The shard is checkpointed by time into the entry as the local engine's chunks are, so a
        worker that dies mid-shard loses at most `checkpoint_seconds` of its work.
        """
        if self.problem is not None:
            raise self.problem
        store = _ShardStore(self.entry, index)
        ((doc_ids, vectors, seconds),) = encode_corpus(
            self.encoder,
            iter(docs),
            chunk_size=len(docs),
            batch_size=batch_size,
            progress=False,
            store=store,
            checkpoint_seconds=checkpoint_seconds,
            token_budget=token_budget,
            texts=self.entry.store,  # checkpoints are the texts stored there
        )
        digests = text_digests([doc_text(doc) for doc in docs]) if self.entry.store is not None else None
        self.entry.write_chunk(index, doc_ids, vectors, strict=True, digests=digests)
        return len(doc_ids), seconds


class _ShardStore:
    """The entry seen through one shard: `encode_corpus` calls it chunk 0, the entry knows it as `index`."""

    def __init__(self, entry: EmbeddingEntry, index: int):
        self.entry, self.index = entry, index

    def stored(self, _: int, doc_ids: list[str]):
        return self.entry.stored(self.index, doc_ids)

    def write_piece(self, _: int, name: str, doc_ids: list[str], vectors) -> None:
        self.entry.write_piece(self.index, name, doc_ids, vectors)


def _plain(value: Any) -> Any:
    """`value` as JSON would give it back (a remembered fingerprint went through JSON)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _ray_gpus() -> str:
    """`` gpus [0]`` inside a Ray actor that was assigned GPUs, else ``""``."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return ""
    try:
        gpus = ray.get_gpu_ids()
    except Exception:  # noqa: BLE001 - not inside a worker
        return ""
    return f" gpus {list(gpus)}" if gpus else ""


@dataclass(frozen=True)
class EncodeJob:
    """What a fan-out engine's workers need: how to load the model, what it must be, where chunks go.

    Attributes:
        load: Builds the encoder on a worker (picklable, e.g. ``partial(load_model, config)``; the
            several-devices engine calls it with the device name).
        fingerprint: The driver's model fingerprint, which every worker must reproduce.
        entry: A started, writable cache entry every worker can see.
        chunk_size: Documents per chunk (= per cache chunk, as the local engine's).
        batch_size: Texts per forward pass.
        checkpoint_seconds: Workers store the part of a chunk encoded so far this often.
        token_budget: Batch by tokens (`harness.retrieval.encode.plan_batches`).
        workers: Filled by the engine once its workers started: where each encodes (the Ray engine:
            ``HOST gpus [0] cuda:0`` per actor), for the result to record.
    """

    load: Callable[..., Encoder]
    fingerprint: dict[str, Any]
    entry: EmbeddingEntry
    chunk_size: int
    batch_size: int
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS
    token_budget: int | None = None
    workers: list[str] = field(default_factory=list, compare=False)


class FanOut:
    """The driver side of a fan-out engine: hand chunks out, read finished ones back in corpus order.

    The engine supplies how a chunk is submitted to a worker and how finished work is collected
    (Ray futures, process-pool futures); this class streams the corpus, skips chunks the cache
    holds, keeps at most what the engine allows in flight, and yields finished chunks in order,
    read back (memory-mapped) from the cache, so what the index gets is what the cache holds.

    Args:
        entry: The started cache entry the workers write into.
        chunk_size: Documents per chunk (a chunk is what one worker encodes at a time).
        bar: A tqdm bar over documents.
        noun: How messages name a chunk (``shard`` for Ray, ``chunk`` otherwise).
        where: Where a chunk failed, for messages (`` on a Ray worker``).
    """

    def __init__(self, entry: EmbeddingEntry, chunk_size: int, bar: Any, noun: str = "chunk", where: str = ""):
        self.entry, self.chunk_size, self.bar, self.noun, self.where = entry, chunk_size, bar, noun, where
        self.finished: dict[int, list[str]] = {}
        self.next_index = self.encoded = self.cached = 0

    def done(self, index: int, doc_ids: list[str], rows: int) -> None:
        """A worker stored chunk `index` (`rows` vectors)."""
        if rows != len(doc_ids):
            raise HarnessError(f"{self.noun} {index}: the worker stored {rows} vectors for {len(doc_ids)} documents")
        self.finished[index] = doc_ids
        self.encoded += 1
        self.bar.update(len(doc_ids))

    def failed(self, index: int, n_docs: int, reason: str) -> HarnessError:
        """The error for a chunk that failed: which documents, why, and that finished work is kept."""
        first = index * self.chunk_size + 1
        return HarnessError(
            f"{self.noun} {index} (documents {first}-{first + n_docs - 1}) failed{self.where}: {reason}. "
            f"{self.encoded + self.cached} finished {self.noun}(s) are kept in {self.entry.root}; rerun to resume"
        )

    def _ordered(self) -> Iterator[tuple[list[str], np.ndarray]]:
        while self.next_index in self.finished:
            index = self.next_index
            doc_ids = self.finished.pop(index)
            try:
                stored_ids, vectors = self.entry.read_chunk(index, mmap=True)
            except CacheCorrupt as exc:
                raise HarnessError(f"{self.noun} {index}: {exc}") from None
            if stored_ids != doc_ids:
                raise HarnessError(
                    f"{self.noun} {index}: {self.entry.root} holds other documents than the corpus has "
                    "(was the cache written by another run at the same time?)"
                )
            self.next_index += 1
            yield doc_ids, vectors

    def stream(
        self,
        docs: Iterator[Doc],
        cached: Callable[[int, list[str]], bool] | None,
        submit: Callable[[int, list[Doc], list[str]], None],
        collect: Callable[[bool], None],
        busy: Callable[[], bool],
    ) -> Iterator[tuple[list[str], np.ndarray, float]]:
        """Run the corpus through the workers.

        Args:
            docs: The document stream.
            cached: (index, doc_ids) → whether the cache already holds that chunk.
            submit: Hand a chunk to a worker (waiting, via `collect(True)`, until one is free).
            collect: Report finished chunks with `done`; with True, wait until at least one is.
            busy: Whether chunks are still in flight.

        Yields:
            (doc_ids, vectors, seconds waited for them) per chunk, in corpus order.
        """
        resumed = time.perf_counter()
        for index, chunk in enumerate(chunked(docs, self.chunk_size)):
            doc_ids = [doc.doc_id for doc in chunk]
            if cached is not None and cached(index, doc_ids):
                self.finished[index] = doc_ids
                self.cached += 1
                self.bar.update(len(doc_ids))
            else:
                submit(index, chunk, doc_ids)
                collect(False)  # whatever already finished frees its worker now
            del chunk  # its texts now live with the worker until the chunk is done
            for doc_ids, vectors in self._ordered():
                yield doc_ids, vectors, time.perf_counter() - resumed
                resumed = time.perf_counter()
        while busy():
            collect(True)
            for doc_ids, vectors in self._ordered():
                yield doc_ids, vectors, time.perf_counter() - resumed
                resumed = time.perf_counter()
