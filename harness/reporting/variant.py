"""Which configuration a result belongs to: one file per configuration, a readable label, a hash.

Two evaluations whose numbers can differ must never share a result file. The settings that
decide the numbers (retrieval depth, self-hit policy, index, encoder runtime and text settings,
the stored vectors' truncation and precision)
are compared with their defaults; the ones that differ are the *variant*:

* the default configuration has no variant: ``<split>.json``, labelled by the model name;
* any other gets ``<split>.<tokens>-<hash8>.json`` (e.g. ``test.hnsw_onnx-int8-3f2a9c1d.json``),
  labelled ``<model> [hnsw onnx-int8]``; the tokens name *which* settings differ, the hash
  (of the model, the split and every differing value) tells two values of one setting apart.

Only differences enter the hash, so a setting added in a later release with a default that
keeps today's behaviour does not rename today's files. Settings that cannot change the numbers
(threads, cache, data paths, the engine) are not part of the configuration; `k_values` is not
either, since every result stores the standard metric set (see `harness.pipeline.config.stored_cutoffs`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# How each differing setting is named in a variant: short, filename-safe, in this order.
_TOKENS: dict[str, Callable[[Any], str]] = {
    "index": lambda value: str(value.get("index", "index")),
    "backend": str,
    "precision": str,
    "truncate_dim": lambda value: f"dim{value}",
    "embedding_precision": str,
    "rescore_multiplier": lambda value: f"rescore{value}" if value else "no-rescore",
    "endpoint": lambda value: str(value).split("/")[0].replace(":", "-"),
    "normalize": lambda value: "dot" if not value else "normalized",
    "query_prefix": lambda value: "prefix",
    "doc_prefix": lambda value: "prefix",
    "max_seq_length": lambda value: f"len{value}",
    "passages": lambda value: (
        f"{value['score']}{value['window']}" + (f"s{value['stride']}" if value["stride"] != value["window"] else "")
    ),
    "depth": lambda value: f"top{value}",
    "self_hits_dropped": lambda value: "self-hits-dropped" if value else "self-hits-kept",
    "bm25": lambda value: "bm25-params",
    "rerank": lambda value: "rerank",
    "fusion": lambda value: str(value.get("method", "fusion")),
    "inputs": lambda value: f"{len(value)}-runs",
}


@dataclass(frozen=True)
class Configuration:
    """The identity of a result: model, split and the decisive settings that differ from defaults.

    Attributes:
        model: The canonical model name (``bm25``, ``run:<file>`` for an external run).
        split: The qrels split.
        changed: Setting name → value, only for settings whose value differs from the default.
    """

    model: str
    split: str
    changed: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(
        cls, model: str, split: str, settings: Mapping[str, Any], defaults: Mapping[str, Any]
    ) -> Configuration:
        """Keep the settings whose value differs from `defaults` (a setting absent there always counts)."""
        changed = {name: value for name, value in settings.items() if name not in defaults or defaults[name] != value}
        return cls(model, split, changed)

    @property
    def config_hash(self) -> str:
        """16 hex digits of sha256 over the model, the split and the changed settings."""
        payload = {"model": self.model, "split": self.split, "changed": dict(self.changed)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def tokens(self) -> list[str]:
        """Short names of the changed settings, without repeats, in a fixed order."""
        order = list(_TOKENS) + sorted(set(self.changed) - set(_TOKENS))
        names = [
            _TOKENS.get(name, lambda value, name=name: name)(self.changed[name])
            for name in order
            if name in self.changed
        ]
        return list(dict.fromkeys(names))

    @property
    def variant(self) -> str:
        """``""`` for the default configuration, else ``<tokens joined by _>-<hash8>``."""
        if not self.changed:
            return ""
        return f"{'_'.join(self.tokens)}-{self.config_hash[:8]}"

    def label(self, name: str | None = None) -> str:
        """The label shown in tables and plots: `name` when given, else the model and its tokens."""
        if name:
            return name
        rerank = self.changed.get("rerank")
        tokens = [t for t in self.tokens if t not in ("rerank", f"top{rerank['depth']}" if rerank else "")]
        label = f"{self.model} [{' '.join(tokens)}]" if tokens else self.model
        if rerank:  # the two stages: "bm25 >> ms-marco-MiniLM-L-6-v2@100"
            label += f" >> {str(rerank['model']).rstrip('/').rsplit('/', 1)[-1]}@{rerank['depth']}"
        return label
