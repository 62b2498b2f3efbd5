"""The embedding store: every vector a model made, kept once per user and found again by what decides it.

One store, under the cache dir (``--cache-dir``, else ``$BEIR_HARNESS_CACHE_DIR``, else the platform's user cache
folder: `cache_dir`), keyed by the model's identity (name, a hash of its weights, tokenizer, settings: every
setting that changes a vector) and the exact text:

* `harness.io.cache.texts` — vectors by (model identity, kind of text, text): document and query vectors,
  fixed-width float32 or a ragged float16 matrix per text (a late-interaction model, `encode_token_matrices`),
  and the checkpoints of an encode in progress, so nothing encoded is ever encoded again;
* `harness.io.cache.entries` — a corpus's (or query set's) vectors in its order, with the checkpoint pieces of a
  chunk being encoded: what a warm rerun, a streamed search and Ray's shards memory-map without parsing the
  corpus; the compression variants (int8 ranges, approximate indexes under ``indexes/``) are derived from it;
* `harness.io.cache.records` — remembered model fingerprints and small records keyed by their inputs;
* `harness.io.cache.upkeep` — ``cache list / prune / clear``, its size, and the read locks prune respects (one
  lock helper: `harness.io.files.hold_lock`).

A cache written by an earlier version is read as it is: the layout and every key are unchanged.
"""

from harness.io.cache.entries import (
    CacheCorrupt,
    EmbeddingEntry,
    cache_dir,
    cache_record,
    content_key,
    embedding_entry,
    not_writable,
)
from harness.io.cache.records import (
    model_files_key,
    recall_fingerprint,
    recall_record,
    record_path,
    remember_fingerprint,
    remember_record,
)
from harness.io.cache.upkeep import check_removable, clear_entries, list_entries, remove_tree

__all__ = [
    "CacheCorrupt",
    "EmbeddingEntry",
    "cache_dir",
    "cache_record",
    "check_removable",
    "clear_entries",
    "content_key",
    "embedding_entry",
    "list_entries",
    "model_files_key",
    "not_writable",
    "recall_fingerprint",
    "recall_record",
    "record_path",
    "remember_fingerprint",
    "remember_record",
    "remove_tree",
]
