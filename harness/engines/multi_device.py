"""Several devices on one machine: one worker process per device, chunks into the cache, read back in order.

``--device cuda:0,cuda:1`` (or ``cuda:all``, or ``cpu,cpu``) starts one process per device. Each loads
the model once on its device and encodes whole chunks exactly as the local engine does
(`harness.engines.shards.ShardEncoder`), writing them into the embedding cache entry; this process streams the
corpus, hands out chunks (at most one in flight per worker, so memory does not grow with the corpus),
and reads finished chunks back in corpus order for the index. So the vectors are the single-device
engine's (up to float rounding between devices), a rerun after a failure encodes only what the
cache lacks, and a worker killed mid-chunk loses at most its last checkpoint.

Processes are started with ``spawn`` (CUDA cannot be used in a forked child).
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

from harness.engines.shards import EncodeJob, FanOut, ShardEncoder
from harness.errors import HarnessError
from harness.io.cache import EmbeddingEntry
from harness.records import Doc
from harness.retrieval.encode import Encoder

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

_WORKER: ShardEncoder | None = None


def start_worker(
    load: Callable[[str], Encoder], entry: EmbeddingEntry, fingerprint: dict[str, Any], devices: Any
) -> None:
    """Process initializer: take a device from the queue and load the model there."""
    global _WORKER
    device = devices.get()
    if device.startswith("cuda"):
        import torch

        # Before anything touches CUDA: this process's current device is its own GPU, not cuda:0, so no
        # call that names no device (a stream, pinned memory, a context) lands on another worker's GPU.
        torch.cuda.set_device(torch.device(device))
    _WORKER = ShardEncoder(lambda: load(device), entry, fingerprint)
    _WORKER.host = f"{_WORKER.host} ({device})"


def _encode_shard(
    index: int, docs: list[Doc], batch_size: int, checkpoint_seconds: float, token_budget: int | None
) -> tuple[int, float]:
    _WORKER.ready()  # raises what went wrong when the worker started
    return _WORKER.encode(index, docs, batch_size, checkpoint_seconds, token_budget)


def _reason(exc: BaseException) -> str:
    """Why a worker failed a chunk, in one line (a worker's out-of-memory is already a HarnessError)."""
    if isinstance(exc, BrokenProcessPool):
        return "a worker process died"
    if isinstance(exc, HarnessError):
        return str(exc)
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def encode_corpus_devices(
    job: EncodeJob,
    docs: Iterator[Doc],
    devices: list[str],
    progress: bool = True,
    cached: Callable[[int, list[str]], bool] | None = None,
) -> Iterator[tuple[list[str], np.ndarray, float]]:
    """Encode a document stream on one worker process per device, chunk by chunk, into `job.entry`.

    Args:
        job: The model (`job.load` is called with the device name), its fingerprint, the cache
            entry, chunk size, batch size, checkpoint interval and token budget.
        docs: The document stream (read here only).
        devices: One worker per entry (``["cuda:0", "cuda:1"]``, ``["cpu", "cpu"]``).
        progress: A tqdm bar over documents on stderr.
        cached: Called with (chunk index, doc_ids); True when that chunk is already in the entry.

    Yields:
        (doc_ids, vectors, seconds waited for them) per chunk, in corpus order; the vectors are
        read back from the cache (memory-mapped).

    Raises:
        HarnessError: A worker could not start, died, or failed a chunk (named, with the reason).
            Finished chunks stay in the cache and a rerun resumes from them.
    """
    from tqdm.auto import tqdm

    if not job.entry.writable:
        raise HarnessError(
            f"several devices write their embeddings into the cache, but {job.entry.root} is not writable"
        )
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    for device in devices:
        queue.put(device)
    bar = tqdm(
        desc=f"encoding corpus ({len(devices)} devices)",
        unit="doc",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    pool = ProcessPoolExecutor(
        max_workers=len(devices),
        mp_context=context,
        initializer=start_worker,
        initargs=(job.load, job.entry, job.fingerprint, queue),
    )
    in_flight: dict[Future, tuple[int, list[str]]] = {}
    fan = FanOut(job.entry, job.chunk_size, bar)

    def collect(block: bool) -> None:
        if not in_flight:
            return
        done, _ = wait(list(in_flight), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for future in done:
            index, doc_ids = in_flight.pop(future)
            try:
                rows, _ = future.result()
            except (HarnessError, BrokenProcessPool, OSError, RuntimeError) as exc:
                raise fan.failed(index, len(doc_ids), _reason(exc)) from None
            fan.done(index, doc_ids, rows)

    def submit(index: int, chunk: list[Doc], doc_ids: list[str]) -> None:
        while len(in_flight) >= len(devices):  # at most one chunk in flight per worker
            collect(True)
        in_flight[
            pool.submit(_encode_shard, index, chunk, job.batch_size, job.checkpoint_seconds, job.token_budget)
        ] = (index, doc_ids)

    try:
        yield from fan.stream(docs, cached, submit, collect, lambda: bool(in_flight))
        logger.info("%d devices: %d chunk(s) encoded, %d from the cache", len(devices), fan.encoded, fan.cached)
    finally:
        bar.close()
        pool.shutdown(wait=True, cancel_futures=True)
