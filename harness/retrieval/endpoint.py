"""Embedding services as models: any OpenAI-compatible ``/v1/embeddings`` endpoint (``--model openai:MODEL``).

Hosted APIs and self-hosted servers (Text Embeddings Inference, vLLM, Infinity, Ollama) speak this protocol.
Texts go through the same rule as local models (the document text rule, the prefixes) and the vectors
through the same normalization. The client is httpx (the ``[endpoint]`` extra).

* **Identity and the cache.** A service has no weights to hash, so its identity is the model name, the
  endpoint (host and path), the dimension and a fingerprint of the vector it returns for a fixed probe text
  (rounded to 3 decimals, so float noise between calls does not count). The identity is remembered in the
  cache (``models/endpoint-<key>.json``): a rerun whose embeddings are all cached sends **no request**. When
  something must be embedded, the probe is sent first; a probe that no longer matches the remembered one
  (a model changed behind the same name) stops the run with a message, and the next run starts a new
  cache entry, so vectors of two models never mix.
* **Throughput and politeness.** Inputs are sent in requests of at most `EndpointSpec.batch_size` texts
  and an estimated `EndpointSpec.token_budget` tokens (4 characters a token: the service's tokenizer is
  unknown here), `EndpointSpec.concurrency` requests in flight. 429 and 5xx answers, dropped connections
  and timeouts are retried with exponential backoff (honouring ``Retry-After``); 401, 403 and 404 stop at
  once with one line naming the endpoint and the model (`harness.io.service`, shared with the LLM judge).
* **Checks.** Every answer must be JSON with one finite vector per input, all of the probe's dimension;
  anything else (an HTML page, NaN, fewer vectors, a changed dimension) stops the run before the batch is
  stored.
* **The key** is read from the environment variable `EndpointSpec.api_key_env` (``OPENAI_API_KEY``) and is
  never written to a result, a log or the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.io.service import EndpointError, EndpointSpec, ServiceClient, usage_summary

__all__ = ["ENDPOINT_PREFIX", "EndpointEncoder", "EndpointError", "EndpointSpec", "embed_texts"]

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

ENDPOINT_PREFIX = "openai:"
PROBE_TEXT = "beir-harness probe: a fixed sentence whose vector identifies the model behind an endpoint."
CHARS_PER_TOKEN = 4


def _vectors(client: ServiceClient, response, expected: int) -> list[list[float]]:
    """The vectors of an embeddings answer, checked: JSON, one finite vector per input."""
    try:
        payload = response.json()
        items = sorted(payload["data"], key=lambda item: item["index"])
        vectors = [item["embedding"] for item in items]
    except (ValueError, KeyError, TypeError):
        start = response.text[:60].strip().replace("\n", " ")
        raise EndpointError(
            f"{client.url}: the answer is not an embeddings response (starts with {start!r}); "
            "is this an OpenAI-compatible /v1 endpoint?"
        ) from None
    if len(vectors) != expected:
        raise EndpointError(f"{client.url}: {len(vectors)} vectors for {expected} inputs (model {client.model})")
    if any(
        not isinstance(v, list) or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in v) for v in vectors
    ):
        raise EndpointError(
            f"{client.url}: the answer holds a vector with NaN, infinite or non-numeric values "
            f"(model {client.model}); nothing of this batch was stored"
        )
    client.count_tokens(payload.get("usage"))
    return vectors


def embed_texts(client: ServiceClient, texts: Sequence[str]) -> list[list[float]]:
    """The vectors of `texts`, in order (one request, retried by the client)."""
    response = client.post({"model": client.model, "input": list(texts), "encoding_format": "float"})
    return _vectors(client, response, len(texts))


def _batches(texts: Sequence[str], size: int, budget: int) -> list[tuple[int, int]]:
    """(start, end) of each request: at most `size` texts and `budget` estimated tokens (at least one text)."""
    spans, start, tokens = [], 0, 0
    for i, text in enumerate(texts):
        cost = len(text) // CHARS_PER_TOKEN + 1
        if i > start and (i - start >= size or tokens + cost > budget):
            spans.append((start, i))
            start, tokens = i, 0
        tokens += cost
    if start < len(texts):
        spans.append((start, len(texts)))
    return spans


class EndpointEncoder:
    """An `Encoder` backed by an embedding service (see the module docstring)."""

    max_seq_length = None
    device = None

    def __init__(
        self,
        model: str,
        spec: EndpointSpec,
        normalize: bool = True,
        query_prefix: str = "",
        doc_prefix: str = "",
        memory: Path | None = None,
    ):
        spec.check()
        self.service_model = model.removeprefix(ENDPOINT_PREFIX)
        self.name = ENDPOINT_PREFIX + self.service_model
        self.spec, self.normalize, self.query_prefix, self.doc_prefix = spec, normalize, query_prefix, doc_prefix
        self._memory = (
            memory / f"endpoint-{hashlib.sha256((self.name + spec.where()).encode()).hexdigest()[:16]}.json"
            if memory is not None
            else None
        )
        self._identity = self._recall()
        self._probed = False
        self._client: ServiceClient | None = None

    @property
    def client(self) -> ServiceClient:
        if self._client is None:
            self._client = ServiceClient(self.service_model, self.spec, "embeddings")
        return self._client

    @property
    def dimension(self) -> int | None:
        return self._identity["dimension"] if self._identity else None

    def _recall(self) -> dict[str, Any] | None:
        try:
            return json.loads(self._memory.read_text(encoding="utf-8")) if self._memory else None
        except (OSError, ValueError):
            return None

    def _probe(self) -> None:
        """Embed the probe text; a probe that differs from the remembered one stops the run (see the module)."""
        import numpy as np

        vector = np.asarray(embed_texts(self.client, [PROBE_TEXT])[0], dtype=np.float32)
        identity = {
            "name": self.name,
            "endpoint": self.spec.where(),
            "dimension": int(vector.shape[0]),
            "probe": hashlib.sha256(np.round(vector.astype(np.float64), 3).tobytes()).hexdigest()[:16],
            "normalize": self.normalize,
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
        }
        previous, self._probed = self._identity, True
        self._remember(identity)
        if previous is not None and previous != identity:
            self._identity = identity
            raise EndpointError(
                f"{self.name} at {self.spec.where()} now answers the probe with other vectors "
                f"(dimension {previous.get('dimension')} → {identity['dimension']}, probe "
                f"{previous.get('probe')} → {identity['probe']}): the model behind the name changed. "
                "Nothing was mixed; rerun to embed everything into a new cache entry"
            )
        self._identity = identity

    def _remember(self, identity: dict[str, Any]) -> None:
        if self._memory is None:
            return
        from harness.io.files import write_json

        try:
            write_json(identity, self._memory)
        except HarnessError as exc:
            logger.debug("cannot remember the endpoint's identity: %s", exc)

    def fingerprint(self) -> dict[str, Any]:
        """The remembered identity (no request), or the probe's on the first run."""
        if self._identity is None:
            self._probe()
        return dict(self._identity)

    def settings(self) -> dict[str, Any]:
        """How texts become vectors, and what the service was asked for (requests, tokens, cost)."""
        usage = self._client.usage() if self._client is not None else usage_summary(self.spec)
        return {
            "backend": "endpoint",
            "endpoint": self.spec.where(),
            "dimension": self.dimension,
            "normalize": self.normalize,
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "endpoint_usage": usage,
        }

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not self._probed:
            self._probe()  # before anything is stored: is it still the model the cache knows?
        spans = _batches(texts, self.spec.batch_size, self.spec.token_budget)
        with ThreadPoolExecutor(max_workers=self.spec.concurrency) as pool:
            parts = list(pool.map(lambda span: embed_texts(self.client, texts[span[0] : span[1]]), spans))
        rows = [vector for part in parts for vector in part]
        dimensions = {len(row) for row in rows}
        if dimensions - {self.dimension}:
            raise EndpointError(
                f"{self.client.url}: vectors of dimension {', '.join(map(str, sorted(dimensions)))}, "
                f"the probe's is {self.dimension} (model {self.service_model}); nothing of this batch "
                "was stored"
            )
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dimension)
        if self.normalize:  # the same rule as the local encoders
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.where(norms == 0, 1.0, norms)
        return vectors

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self.query_prefix + text for text in texts])

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self.doc_prefix + text for text in texts])
