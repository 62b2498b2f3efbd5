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
  once with one line naming the endpoint and the model.
* **Checks.** Every answer must be JSON with one finite vector per input, all of the probe's dimension;
  anything else (an HTML page, NaN, fewer vectors, a changed dimension) stops the run before the batch is
  stored.
* **The key** is read from the environment variable `EndpointSpec.api_key_env` (``OPENAI_API_KEY``) and is
  never written to a result, a log or the cache.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from harness.errors import HarnessError, MissingDependencyError, setting

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

ENDPOINT_PREFIX = "openai:"
PROBE_TEXT = "beir-harness probe: a fixed sentence whose vector identifies the model behind an endpoint."
CHARS_PER_TOKEN = 4


class EndpointError(HarnessError):
    """The embedding service refused, failed, or answered something that is not embeddings."""


@dataclass(frozen=True)
class EndpointSpec:
    """Where the embedding service is and how to talk to it.

    Attributes:
        url: The service's base URL (``https://api.openai.com/v1`` or ``http://localhost:8080/v1``); the
            request goes to ``<url>/embeddings``. None means ``$BEIR_HARNESS_ENDPOINT``.
        api_key_env: The environment variable holding the API key (sent as a Bearer token when set).
        batch_size: Most texts per request.
        token_budget: Most estimated tokens per request.
        concurrency: Requests in flight.
        timeout: Seconds to wait for one answer.
        attempts: Tries per request (429, 5xx, dropped connections, timeouts).
        backoff: First wait between tries, in seconds (doubling), unless the service says ``Retry-After``.
        price_per_1m_tokens: What 1M tokens cost (the result then records the cost); None records none.
    """

    url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 64
    token_budget: int = 100_000
    concurrency: int = 4
    timeout: float = 60.0
    attempts: int = 6
    backoff: float = 1.0
    price_per_1m_tokens: float | None = None

    def resolved_url(self) -> str:
        """The base URL, checked: http(s), with a host.

        Raises:
            EndpointError: No URL given, or one that is not http(s).
        """
        url = self.url or os.environ.get("BEIR_HARNESS_ENDPOINT")
        if not url:
            raise EndpointError(f"an openai: model needs an endpoint: set {setting('endpoint')} (or "
                                "$BEIR_HARNESS_ENDPOINT), e.g. https://api.openai.com/v1")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise EndpointError(f"{setting('endpoint')} {url!r} is not an http(s) URL (e.g. http://localhost:8080/v1)")
        return url.rstrip("/")

    def check(self) -> None:
        """Refuse impossible settings before any request.

        Raises:
            EndpointError: Naming the setting at fault.
        """
        self.resolved_url()
        for name in ("batch_size", "token_budget", "concurrency", "attempts"):
            if getattr(self, name) < 1:
                raise EndpointError(f"{setting(name if name != 'batch_size' else 'endpoint_batch_size')} must be at "
                                    f"least 1, got {getattr(self, name)}")
        if self.timeout <= 0 or (self.price_per_1m_tokens is not None and self.price_per_1m_tokens < 0):
            raise EndpointError(f"{setting('endpoint_timeout')} must be positive and "
                                f"{setting('price_per_1m_tokens')} 0 or more")

    def where(self) -> str:
        """Host and path, the endpoint part of the identity (``api.openai.com/v1``)."""
        parts = urlsplit(self.resolved_url())
        return parts.netloc + parts.path


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (a number, or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class _Client:
    """One service: POSTs batches of texts, with retries, checks and usage counts (thread-safe)."""

    def __init__(self, model: str, spec: EndpointSpec):
        try:
            import httpx
        except ImportError as exc:
            raise MissingDependencyError("openai: models need httpx (pip install 'beir-harness[endpoint]')") from exc
        self.httpx, self.model, self.spec = httpx, model, spec
        self.url = spec.resolved_url() + "/embeddings"
        key = os.environ.get(spec.api_key_env)
        self.has_key = bool(key)
        self.client = httpx.Client(timeout=spec.timeout, headers={"Authorization": f"Bearer {key}"} if key else {})
        self.lock = threading.Lock()
        self.requests = self.tokens = self.retries = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of `texts`, in order (one request, retried)."""
        for attempt in range(1, self.spec.attempts + 1):
            wait = self.spec.backoff * 2 ** (attempt - 1)
            try:
                response = self.client.post(self.url, json={"model": self.model, "input": list(texts),
                                                            "encoding_format": "float"})
            except (self.httpx.TimeoutException, self.httpx.TransportError) as exc:
                reason = f"{type(exc).__name__}: {exc}".strip()
            else:
                with self.lock:
                    self.requests += 1
                if response.status_code == 200:
                    return self._vectors(response, len(texts))
                self._refuse(response)
                reason, wait = f"HTTP {response.status_code}", _retry_after(response.headers.get("Retry-After")) or wait
            if attempt == self.spec.attempts:
                raise EndpointError(f"{self.url}: giving up after {attempt} attempts ({reason}) for model {self.model}")
            with self.lock:
                self.retries += 1
            logger.warning("%s: %s; retrying in %.1f s (attempt %d of %d)", self.url, reason, wait, attempt + 1,
                           self.spec.attempts)
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _refuse(self, response) -> None:
        """Stop at once on answers a retry cannot fix."""
        status = response.status_code
        if status in (401, 403):
            hint = (f"no API key: set ${self.spec.api_key_env}, or name the variable with {setting('api_key_env')}"
                    if not self.has_key else f"check the key in ${self.spec.api_key_env}")
            raise EndpointError(f"{self.url}: HTTP {status} for model {self.model} ({hint})")
        if status == 404:
            raise EndpointError(f"{self.url}: HTTP 404 for model {self.model}: no such model or path (check "
                                f"{setting('endpoint')}, which should end before /embeddings, and the model name)")
        if status != 429 and status < 500:
            raise EndpointError(f"{self.url}: HTTP {status} for model {self.model}: {response.text[:200].strip()}")

    def _vectors(self, response, expected: int) -> list[list[float]]:
        try:
            payload = response.json()
            items = sorted(payload["data"], key=lambda item: item["index"])
            vectors = [item["embedding"] for item in items]
        except (ValueError, KeyError, TypeError):
            start = response.text[:60].strip().replace("\n", " ")
            raise EndpointError(f"{self.url}: the answer is not an embeddings response (starts with {start!r}); "
                                "is this an OpenAI-compatible /v1 endpoint?") from None
        if len(vectors) != expected:
            raise EndpointError(f"{self.url}: {len(vectors)} vectors for {expected} inputs (model {self.model})")
        if any(not isinstance(v, list) or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in v)
               for v in vectors):
            raise EndpointError(f"{self.url}: the answer holds a vector with NaN, infinite or non-numeric values "
                                f"(model {self.model}); nothing of this batch was stored")
        usage = payload.get("usage") or {}
        with self.lock:
            self.tokens += int(usage.get("total_tokens") or usage.get("prompt_tokens") or 0)
        return vectors


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

    def __init__(self, model: str, spec: EndpointSpec, normalize: bool = True, query_prefix: str = "",
                 doc_prefix: str = "", memory: Path | None = None):
        spec.check()
        self.service_model = model.removeprefix(ENDPOINT_PREFIX)
        self.name = ENDPOINT_PREFIX + self.service_model
        self.spec, self.normalize, self.query_prefix, self.doc_prefix = spec, normalize, query_prefix, doc_prefix
        self._memory = memory / f"endpoint-{hashlib.sha256((self.name + spec.where()).encode()).hexdigest()[:16]}.json" \
            if memory is not None else None
        self._identity = self._recall()
        self._probed = False
        self._client: _Client | None = None

    @property
    def client(self) -> _Client:
        if self._client is None:
            self._client = _Client(self.service_model, self.spec)
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

        vector = np.asarray(self.client.embed([PROBE_TEXT])[0], dtype=np.float32)
        identity = {"name": self.name, "endpoint": self.spec.where(), "dimension": int(vector.shape[0]),
                    "probe": hashlib.sha256(np.round(vector.astype(np.float64), 3).tobytes()).hexdigest()[:16],
                    "normalize": self.normalize, "query_prefix": self.query_prefix, "doc_prefix": self.doc_prefix}
        previous, self._probed = self._identity, True
        self._remember(identity)
        if previous is not None and previous != identity:
            self._identity = identity
            raise EndpointError(f"{self.name} at {self.spec.where()} now answers the probe with other vectors "
                                f"(dimension {previous.get('dimension')} → {identity['dimension']}, probe "
                                f"{previous.get('probe')} → {identity['probe']}): the model behind the name changed. "
                                "Nothing was mixed; rerun to embed everything into a new cache entry")
        self._identity = identity

    def _remember(self, identity: dict[str, Any]) -> None:
        if self._memory is None:
            return
        from harness.io.formats import write_json

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
        usage: dict[str, Any] = {"requests": 0, "tokens": 0, "retries": 0}
        if self._client is not None:
            usage = {"requests": self._client.requests, "tokens": self._client.tokens, "retries": self._client.retries}
        if self.spec.price_per_1m_tokens is not None:
            usage["cost"] = round(usage["tokens"] * self.spec.price_per_1m_tokens / 1e6, 6)
        return {"backend": "endpoint", "endpoint": self.spec.where(), "dimension": self.dimension,
                "normalize": self.normalize, "query_prefix": self.query_prefix, "doc_prefix": self.doc_prefix,
                "endpoint_usage": usage}

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not self._probed:
            self._probe()  # before anything is stored: is it still the model the cache knows?
        spans = _batches(texts, self.spec.batch_size, self.spec.token_budget)
        with ThreadPoolExecutor(max_workers=self.spec.concurrency) as pool:
            parts = list(pool.map(lambda span: self.client.embed(texts[span[0]:span[1]]), spans))
        rows = [vector for part in parts for vector in part]
        dimensions = {len(row) for row in rows}
        if dimensions - {self.dimension}:
            raise EndpointError(f"{self.client.url}: vectors of dimension {', '.join(map(str, sorted(dimensions)))}, "
                                f"the probe's is {self.dimension} (model {self.service_model}); nothing of this batch "
                                "was stored")
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dimension)
        if self.normalize:  # the same rule as the local encoders
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors /= np.where(norms == 0, 1.0, norms)
        return vectors

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self.query_prefix + text for text in texts])

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self.doc_prefix + text for text in texts])
