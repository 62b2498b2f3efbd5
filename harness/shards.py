"""The worker side of the engines that fan a corpus out: encode a shard into the shared cache entry.

A shard is one chunk of the embedding cache (`harness.cache`). A worker — a Ray actor
(`harness.ray_engine`) or a local process on one device (`harness.multi_device`) — loads the model
once, checks that its weights are the driver's, and encodes each shard exactly as the local engine
encodes a chunk (`harness.encode.encode_corpus`: same order, same batches, the same time-based
checkpoints), then writes it whole into the entry.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

from harness.cache import EmbeddingEntry
from harness.encode import DEFAULT_CHECKPOINT_SECONDS, Encoder, encode_corpus
from harness.errors import HarnessError
from harness.records import Doc


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
                raise HarnessError(f"worker on {self.host} cannot see the cache entry {entry.root}: the cache "
                                   "directory must be on a filesystem every Ray node mounts (set --cache-dir to such "
                                   "a path)")
            self.encoder = load()
            mine = self.encoder.fingerprint() if hasattr(self.encoder, "fingerprint") else None
            if _plain(mine) != _plain(fingerprint):
                raise HarnessError(f"worker on {self.host} loaded a different model than the driver (fingerprints "
                                   f"{mine} vs {fingerprint}); install the same model and versions on every node")
        except HarnessError as exc:
            self.problem = exc

    def ready(self) -> str:
        """This worker's host name (and the GPUs Ray assigned it); raises what went wrong in the constructor."""
        if self.problem is not None:
            raise self.problem
        return self.host + _ray_gpus()

    def encode(self, index: int, docs: list[Doc], batch_size: int,
               checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
               token_budget: int | None = None) -> tuple[int, float]:
        """Encode one shard as the local engine encodes a chunk, and store it; returns (rows, seconds).

        The shard is checkpointed by time into the entry as the local engine's chunks are, so a
        worker that dies mid-shard loses at most `checkpoint_seconds` of its work.
        """
        if self.problem is not None:
            raise self.problem
        store = _ShardStore(self.entry, index)
        (doc_ids, vectors, seconds), = encode_corpus(self.encoder, iter(docs), chunk_size=len(docs),
                                                     batch_size=batch_size, progress=False, store=store,
                                                     checkpoint_seconds=checkpoint_seconds, token_budget=token_budget)
        self.entry.write_chunk(index, doc_ids, vectors, strict=True)
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
