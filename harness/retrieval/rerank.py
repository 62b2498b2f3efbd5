"""Reranking with a cross-encoder: a stage that turns (queries, corpus, run) into a run.

BEIR's protocol: each query's top `depth` first-stage documents are scored by the cross-encoder on
(query text, ``(title + " " + text).strip()``) and re-sorted by that score, which replaces the
first-stage score; documents below `depth` are dropped, so the reranked run has `depth` documents
per query. The model's own activation is applied as sentence-transformers applies it
(``CrossEncoder.predict``: raw logits for the ms-marco models, a sigmoid where the model says so).

Scores are cached, content-addressed by the reranker's fingerprint and the (query text, document
text) pair, in ``<cache dir>/rerank/<key>/`` — ``scores-*.npy`` files of (16-byte pair hash, float32
score) rows, each written atomically, never pickle — so a depth sweep (10, 50, 100, 200) scores only
the pairs it has not seen, and a killed run resumes from the pairs it had stored (written every
`checkpoint_seconds` of scoring).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, MissingDependencyError, ModelLoadError, setting
from harness.io.files import atomic_writer, remove_stale_temporaries
from harness.records import Run

logger = logging.getLogger(__name__)

PAIR_DTYPE = [("pair", "S16"), ("score", "<f4")]
REFERENCE_BACKEND = "torch"  # `harness.runtimes.registry.TORCH`: the cross-encoder as sentence-transformers runs it


@dataclass(frozen=True)
class RerankSpec:
    """Which cross-encoder reranks how deep (recorded in the result's config).

    Attributes:
        model: A sentence-transformers ``CrossEncoder`` name or local folder.
        depth: First-stage documents reranked per query; the reranked run keeps exactly these.
        batch_size: Pairs per forward pass.
        max_length: Truncation of a (query, document) pair in tokens; None: the model's.
        backend: The runtime that scores the pairs (``--rerank-backend``, a `harness.runtimes.registry` name or
            ``auto``); torch, the default, is not recorded in the configuration, so results and cached scores
            from before the option keep their identity.
    """

    model: str
    depth: int = 100
    batch_size: int = 32
    max_length: int | None = None
    backend: str = REFERENCE_BACKEND

    def check(self, largest_k: int) -> None:
        """Refuse a depth below the largest cutoff: metrics there would see fewer documents than they cut.

        Raises:
            HarnessError: A depth or batch size below 1, or a depth below `largest_k`.
        """
        if self.depth < 1 or self.batch_size < 1:
            raise HarnessError(
                f"rerank_depth and rerank_batch_size must be positive, got {self.depth} and {self.batch_size}"
            )
        if self.depth < largest_k:
            raise HarnessError(
                f"rerank depth {self.depth} is below the largest cutoff {largest_k}: @{largest_k} "
                f"metrics would count only {self.depth} reranked documents; raise --rerank-depth or "
                "lower --k"
            )

    def to_config(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "depth": self.depth,
            **({"max_length": self.max_length} if self.max_length else {}),
            **({"backend": self.backend} if self.backend != REFERENCE_BACKEND else {}),
        }

    def short_name(self) -> str:
        return self.model.rstrip("/").rsplit("/", 1)[-1]


CANDIDATES_DEPTH = 100  # documents per query of a candidate set when no depth is given


@dataclass(frozen=True)
class CandidateSpec:
    """One candidate set for every rerank of a command (``--candidates RUN_OR_SYSTEM --depth N``): each query's top
    `depth` documents of a run file or of a system's ranking, after the dataset's exclusions; every rerank written
    ``>> CROSS_ENCODER`` reranks exactly these (`harness.pipeline.candidates`).

    Attributes:
        source: A run file (``run:FILE`` or a path), or a system as ``evaluate --model`` takes it (``bm25``,
            ``rrf(bm25, e5)``).
        depth: Documents per query kept (and reranked).
        run_path: The candidate set written as a TREC run (``candidates-<sha256 12>.trec``), once made.
        sha256: The sha256 of that file: the set's digest, recorded in each rerank's result.
    """

    source: str
    depth: int = CANDIDATES_DEPTH
    run_path: Path | None = None
    sha256: str = ""

    def record(self) -> dict[str, Any]:
        """What a rerank's result records of its candidates (config ``candidates``)."""
        return {"source": self.source, "depth": self.depth, "sha256": self.sha256}


def model_kind(source: str) -> str:
    """What a sentence-transformers folder holds: ``bi-encoder``, ``cross-encoder``, ``sparse-encoder``.

    Read from the folder's own files (``config_sentence_transformers.json``'s model_type, the modules
    it lists, the transformer's architecture); ``unknown`` when `source` is not a local folder.
    """
    folder = Path(source)
    if not folder.is_dir():
        return "unknown"

    def read(name: str) -> Any:
        try:
            return json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    declared = (read("config_sentence_transformers.json") or {}).get("model_type")
    if declared in ("CrossEncoder", "SparseEncoder", "SentenceTransformer"):
        return {"CrossEncoder": "cross-encoder", "SparseEncoder": "sparse-encoder"}.get(declared, "bi-encoder")
    modules = " ".join(str(m.get("type", "")) for m in read("modules.json") or [] if isinstance(m, dict))
    if "SpladePooling" in modules or "MLMTransformer" in modules:
        return "sparse-encoder"
    if "Pooling" in modules:
        return "bi-encoder"
    architectures = (read("config.json") or {}).get("architectures") or []
    if any(str(a).endswith("ForSequenceClassification") for a in architectures):
        return "cross-encoder"
    return "unknown"


class Reranker:
    """A loaded ``CrossEncoder`` with the fingerprint its cached scores are keyed by."""

    def __init__(self, spec: RerankSpec, device: str = "cpu", precision: str = "fp32"):
        from harness.retrieval.models import model_folder, resolve_model_source

        self.spec = spec
        source = resolve_model_source(spec.model)
        kind = model_kind(model_folder(spec.model))
        if kind in ("bi-encoder", "sparse-encoder"):
            raise HarnessError(
                f"{spec.model} is a {kind} (it embeds texts one by one), not a cross-encoder; a "
                f"reranker scores (query, document) pairs: give a CrossEncoder model as "
                f"{setting('rerank_model')}"
            )
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise MissingDependencyError("reranking needs sentence-transformers") from exc
        try:
            self.model = CrossEncoder(source, device=device, max_length=spec.max_length)
        except Exception as exc:  # noqa: BLE001 - hub, IO and config errors have no common base
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"cannot load cross-encoder {spec.model!r}: {detail[:300]}") from exc
        from harness.retrieval.devices import torch_dtype

        self.model.model.to(torch_dtype(precision))
        self.precision = precision

    def fingerprint(self) -> dict[str, Any]:
        """Name, a sha256 of the weights, tokenizer, max length, activation and precision."""
        import torch

        digest = hashlib.sha256()
        for name, tensor in self.model.model.state_dict().items():
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        return {
            "name": self.spec.model,
            "weights_sha256": digest.hexdigest(),
            "tokenizer": type(self.model.tokenizer).__name__,
            # sentence-transformers 6 renamed max_length; older releases only have it.
            "max_length": getattr(self.model, "max_seq_length", None) or getattr(self.model, "max_length", None),
            "activation": type(getattr(self.model, "activation_fn", None)).__name__,
            **({"precision": self.precision} if self.precision != "fp32" else {}),
        }

    def score(self, pairs: Sequence[tuple[str, str]]):
        """Scores of (query, document) pairs, float32, with the model's own activation."""
        import numpy as np

        return np.asarray(
            self.model.predict(
                list(pairs), batch_size=self.spec.batch_size, show_progress_bar=False, convert_to_numpy=True
            ),
            dtype=np.float32,
        ).reshape(-1)


def pair_hash(query: str, document: str) -> bytes:
    """16 bytes of sha256 over the pair (JSON, so no separator can collide)."""
    return hashlib.sha256(json.dumps([query, document], ensure_ascii=False).encode()).digest()[:16]


class ScoreCache:
    """Content-addressed (query, document) → score for one reranker; None `root` caches nothing."""

    def __init__(self, root: Path | None, fingerprint: Mapping[str, Any]):
        from harness.io.cache import content_key

        self.folder = root / "rerank" / content_key(dict(fingerprint)) if root is not None else None
        self.scores: dict[bytes, float] = {}
        if self.folder is not None and self.folder.is_dir():
            import numpy as np

            remove_stale_temporaries(self.folder)
            for path in sorted(self.folder.glob("scores-*.npy")):
                try:
                    rows = np.load(path, allow_pickle=False)
                    self.scores.update(zip(rows["pair"].tolist(), rows["score"].tolist()))
                except (OSError, ValueError, KeyError) as exc:
                    logger.warning("ignoring a damaged rerank score file %s: %s", path, exc)

    def store(self, pairs: Sequence[bytes], scores: Sequence[float]) -> None:
        """Write new scores as one more file (atomically); an unwritable cache only costs the reuse."""
        import numpy as np

        if self.folder is None or not pairs:
            return
        rows = np.empty(len(pairs), dtype=PAIR_DTYPE)
        rows["pair"], rows["score"] = pairs, scores
        name = hashlib.sha256(b"".join(pairs)).hexdigest()[:16]
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_writer(self.folder / f"scores-{name}.npy", "wb") as handle:
                np.save(handle, rows, allow_pickle=False)
        except (OSError, HarnessError) as exc:
            logger.warning("cannot cache rerank scores in %s (%s); continuing", self.folder, exc)
            self.folder = None


def rerank(
    run: Run,
    queries: Mapping[str, str],
    documents: Mapping[str, str],
    reranker: Reranker,
    cache: ScoreCache,
    progress: bool = True,
    checkpoint_seconds: float = 60.0,
) -> tuple[Run, dict[str, int]]:
    """Rerank each query's top `depth` documents of `run` with `reranker` (see the module docstring).

    Args:
        run: The first-stage run.
        queries: query_id → query text.
        documents: doc_id → ``(title + " " + text).strip()`` for every document to rerank.
        reranker: The cross-encoder.
        cache: Scores already known; new ones are added (every `checkpoint_seconds` of scoring).
        progress: A tqdm bar over pairs on stderr.

    Returns:
        (the reranked run, {"pairs": total pairs, "cached": pairs whose score came from the cache}).
    """
    from tqdm.auto import tqdm

    depth = reranker.spec.depth
    wanted: dict[str, list[tuple[str, bytes]]] = {}
    todo: dict[bytes, tuple[str, str]] = {}
    for query_id in run:
        for hit in run[query_id][:depth]:
            key = pair_hash(queries[query_id], documents[hit.doc_id])
            wanted.setdefault(query_id, []).append((hit.doc_id, key))
            if key not in cache.scores:
                todo[key] = (queries[query_id], documents[hit.doc_id])
    total = sum(len(pairs) for pairs in wanted.values())
    keys = list(todo)
    batch = reranker.spec.batch_size * 8
    bar = tqdm(
        total=len(keys), desc="reranking", unit="pair", disable=not progress, file=sys.stderr, dynamic_ncols=True
    )
    pending: list[bytes] = []
    last_write = time.perf_counter()
    try:
        for start in range(0, len(keys), batch):
            part = keys[start : start + batch]
            for key, score in zip(part, reranker.score([todo[key] for key in part]).tolist()):
                cache.scores[key] = score
            pending += part
            bar.update(len(part))
            if time.perf_counter() - last_write >= checkpoint_seconds:
                cache.store(pending, [cache.scores[k] for k in pending])
                pending, last_write = [], time.perf_counter()
    finally:
        cache.store(pending, [cache.scores[k] for k in pending])  # also when interrupted: keep what was scored
        bar.close()
    reranked = {
        query_id: {doc_id: float(cache.scores[key]) for doc_id, key in pairs} for query_id, pairs in wanted.items()
    }
    for query_id in run:
        reranked.setdefault(query_id, {})
    pairs = [(queries[query_id], documents[doc_id]) for query_id, hits in wanted.items() for doc_id, _ in hits]
    counts = {"pairs": total, "cached": total - len(keys), "tokens": pair_tokens(reranker, pairs)}
    return Run.adopt(reranked, name=run.name), counts


def pair_tokens(reranker: Any, pairs: Sequence[tuple[str, str]], batch: int = 256) -> int | None:
    """The tokens the cross-encoder reads for `pairs` (query and document together, truncated as it truncates them;
    padding not counted), by its own tokenization (``CrossEncoder.preprocess``); None for a reranker without one."""
    model = getattr(reranker, "model", None) or getattr(getattr(reranker, "reranker", None), "model", None)
    if not hasattr(model, "preprocess"):
        return None
    total = 0
    for start in range(0, len(pairs), batch):
        features = model.preprocess([tuple(pair) for pair in pairs[start : start + batch]])
        total += int(features["attention_mask"].sum())
    return total
