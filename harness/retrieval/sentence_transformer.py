"""The torch encoder: a sentence-transformers model as a bi-encoder, loaded on one device in one precision, with
the pipelined path for accelerators (the next batch tokenized while the model runs this one).

torch and sentence-transformers are imported only inside `load_sentence_transformer` and the encoder's methods.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.errors import MissingDependencyError, ModelLoadError
from harness.retrieval.devices import DeviceOutOfMemory, is_out_of_memory
from harness.retrieval.models import DEFAULT_MODEL, canonical_model_name, check_model_available, resolve_model_source

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

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
            if self.query_prompt_name
            else None,
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
            from harness.retrieval.models import weights_sha256

            tokenizer = getattr(self.model, "tokenizer", None)
            self._fingerprint = {
                "name": self.name,
                "weights_sha256": weights_sha256(self.model),
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
        encoded = self.model.tokenizer(
            [prefix + text for text in texts], truncation=True, max_length=self.max_seq_length
        )["input_ids"]
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
            inputs = {
                k: v.to(device, non_blocking=pin) if isinstance(v, torch.Tensor) else v for k, v in features.items()
            }  # not sentence-transformers' batch_to_device: it blocks
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


def _refuse_multi_vector(name: str) -> None:
    """A multi-vector model read as a single-vector one would pool its token vectors into numbers that are no
    model's: refused, naming the way it is evaluated."""
    from harness.retrieval.index.multivector import is_multi_vector_folder
    from harness.retrieval.models import model_folder

    if is_multi_vector_folder(model_folder(name)):
        raise ModelLoadError(
            f"{name} is a multi-vector (late-interaction) model, not a single-vector one: its texts are matrices of "
            "token vectors scored by MaxSim; evaluate it as a system of its own (evaluate DATASET --model "
            f"{name}), not where one vector per text is needed"
        )


def load_sentence_transformer(
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
    check_model_available(name, known=("bm25",))
    _refuse_multi_vector(name)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise MissingDependencyError(
            "sentence-transformers is not installed (pip install sentence-transformers)"
        ) from exc
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
    return SentenceTransformerEncoder(
        canonical_model_name(name),
        model,
        batch_size=batch_size,
        normalize=normalize,
        query_prefix=query_prefix,
        doc_prefix=doc_prefix,
        query_prompt_name=query_prompt,
        doc_prompt_name=doc_prompt,
        precision=precision,
    )
