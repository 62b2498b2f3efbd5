"""OpenAI-compatible services over HTTP: where one is, and a polite client for it.

Shared by the embedding models (``/embeddings``, `harness.retrieval.endpoint`) and the LLM judge
(``/chat/completions``, `harness.judging.llm`), so both retry, back off and count alike (the retry loop is the
downloads' too: `harness.io.download.retrying`):

* 429 and 5xx answers, dropped connections and timeouts are retried with exponential backoff
  (`EndpointSpec.backoff`, doubling), honouring ``Retry-After`` (seconds or an HTTP date), at most
  `EndpointSpec.attempts` tries; 401, 403, 404 and other 4xx stop at once with one line naming the
  URL and the model.
* `EndpointSpec.concurrency` is how many requests the caller keeps in flight (a thread pool); the
  client is thread-safe and counts requests, retries and the tokens the service reports, and the cost
  when `EndpointSpec.price_per_1m_tokens` is set.
* The key is read from the environment variable `EndpointSpec.api_key_env` and sent as a Bearer token;
  it is never written to a result, a log or a cache.

The client is httpx (the ``[endpoint]`` extra), imported when a client is made.
"""

from __future__ import annotations

import email.utils
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from harness.errors import HarnessError, MissingDependencyError, setting
from harness.io.download import Retry, retrying

logger = logging.getLogger(__name__)


class EndpointError(HarnessError):
    """The service refused, failed, or answered something that is not what was asked for."""


@dataclass(frozen=True)
class EndpointSpec:
    """Where the service is and how to talk to it.

    Attributes:
        url: The service's base URL (``https://api.openai.com/v1`` or ``http://localhost:8080/v1``); the
            request goes to ``<url>/embeddings`` or ``<url>/chat/completions``. None means
            ``$BEIR_HARNESS_ENDPOINT``.
        api_key_env: The environment variable holding the API key (sent as a Bearer token when set).
        batch_size: Most texts per embeddings request.
        token_budget: Most estimated tokens per embeddings request.
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
            raise EndpointError(
                f"an openai: model needs an endpoint: set {setting('endpoint')} (or "
                "$BEIR_HARNESS_ENDPOINT), e.g. https://api.openai.com/v1"
            )
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
                raise EndpointError(
                    f"{setting(name if name != 'batch_size' else 'endpoint_batch_size')} must be at "
                    f"least 1, got {getattr(self, name)}"
                )
        if self.timeout <= 0 or (self.price_per_1m_tokens is not None and self.price_per_1m_tokens < 0):
            raise EndpointError(
                f"{setting('endpoint_timeout')} must be positive and {setting('price_per_1m_tokens')} 0 or more"
            )

    def where(self) -> str:
        """Host and path, the endpoint part of an identity (``api.openai.com/v1``)."""
        parts = urlsplit(self.resolved_url())
        return parts.netloc + parts.path


def retry_after(value: str | None) -> float | None:
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


class ServiceClient:
    """One path of one service (``embeddings``, ``chat/completions``): POSTs JSON with retries and usage
    counts (thread-safe; see the module docstring)."""

    def __init__(self, model: str, spec: EndpointSpec, path: str):
        try:
            import httpx
        except ImportError as exc:
            raise MissingDependencyError("openai: models need httpx (pip install 'beir-harness[endpoint]')") from exc
        self.httpx, self.model, self.spec, self.path = httpx, model, spec, path
        self.url = f"{spec.resolved_url()}/{path}"
        key = os.environ.get(spec.api_key_env)
        self.has_key = bool(key)
        self.client = httpx.Client(timeout=spec.timeout, headers={"Authorization": f"Bearer {key}"} if key else {})
        self.lock = threading.Lock()
        self.requests = self.tokens = self.retries = 0

    def post(self, payload: Mapping[str, Any]):
        """The service's HTTP 200 answer to `payload` (an httpx response), after retries.

        Raises:
            EndpointError: A refusal a retry cannot fix, or still failing after `EndpointSpec.attempts` tries.
        """

        def attempt():
            try:
                response = self.client.post(self.url, json=dict(payload))
            except (self.httpx.TimeoutException, self.httpx.TransportError) as exc:
                raise Retry(f"{type(exc).__name__}: {exc}".strip()) from None
            with self.lock:
                self.requests += 1
            if response.status_code == 200:
                return response
            self.refuse(response)
            raise Retry(f"HTTP {response.status_code}", retry_after(response.headers.get("Retry-After")) or None)

        def give_up(failure: Retry, attempts: int) -> EndpointError:
            return EndpointError(f"{self.url}: giving up after {attempts} attempts ({failure}) for model {self.model}")

        return retrying(attempt, self.spec.attempts, self.spec.backoff, self.url, give_up, self._retried, logger)

    def _retried(self) -> None:
        with self.lock:
            self.retries += 1

    def refuse(self, response) -> None:
        """Stop at once on answers a retry cannot fix (401, 403, 404, other 4xx but 429)."""
        status = response.status_code
        if status in (401, 403):
            hint = (
                f"no API key: set ${self.spec.api_key_env}, or name the variable with {setting('api_key_env')}"
                if not self.has_key
                else f"check the key in ${self.spec.api_key_env}"
            )
            raise EndpointError(f"{self.url}: HTTP {status} for model {self.model} ({hint})")
        if status == 404:
            raise EndpointError(
                f"{self.url}: HTTP 404 for model {self.model}: no such model or path (check "
                f"{setting('endpoint')}, which should end before /{self.path}, and the model name)"
            )
        if status != 429 and status < 500:
            raise EndpointError(f"{self.url}: HTTP {status} for model {self.model}: {response.text[:200].strip()}")

    def count_tokens(self, usage: Mapping[str, Any] | None) -> None:
        """Add the tokens an answer's ``usage`` reports."""
        usage = usage or {}
        with self.lock:
            self.tokens += int(usage.get("total_tokens") or usage.get("prompt_tokens") or 0)

    def usage(self) -> dict[str, Any]:
        """Requests sent, tokens reported, retries, and the cost when priced."""
        return usage_summary(self.spec, self.requests, self.tokens, self.retries)


def usage_summary(spec: EndpointSpec, requests: int = 0, tokens: int = 0, retries: int = 0) -> dict[str, Any]:
    """``{"requests", "tokens", "retries"[, "cost"]}``: the cost when `spec` has a price."""
    usage: dict[str, Any] = {"requests": requests, "tokens": tokens, "retries": retries}
    if spec.price_per_1m_tokens is not None:
        usage["cost"] = round(tokens * spec.price_per_1m_tokens / 1e6, 6)
    return usage
