"""OpenAI-compatible embedding services as models, against a real HTTP server on 127.0.0.1 that implements
``/v1/embeddings`` with the hashing encoder and injects faults one request at a time."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cli_runner import invoke

from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.retrieval.encode import HashingEncoder
from harness.retrieval.endpoint import EndpointEncoder, EndpointError, EndpointSpec, _batches

KEY = "sk-test-secret-1234"


class _Service:
    """What the fake service does: a hashing model of `dimension`, `shift` to change the model behind the
    name, an optional required key, and scripted behaviours consumed one per request."""

    def __init__(self):
        self.dimension, self.shift, self.key = 64, 0.0, None
        self.behaviours: list[str] = []
        self.requests: list[int] = []  # inputs per request
        self.url = ""


@pytest.fixture
def service():
    state = _Service()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json", headers=()):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/embeddings":
                self._send(404, b'{"error": "not found"}')
                return
            if state.key and self.headers.get("Authorization") != f"Bearer {state.key}":
                self._send(401, b'{"error": "invalid api key"}')
                return
            behaviour = state.behaviours.pop(0) if state.behaviours else "normal"
            kind, _, arg = behaviour.partition(":")
            state.requests.append(len(body["input"]))
            if kind == "429":
                self._send(429, b'{"error": "rate limited"}', headers=[("Retry-After", arg or "0")])
                return
            if kind == "500":
                self._send(500, b'{"error": "boom"}')
                return
            if kind == "drop":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b'{"data": [')
                self.close_connection = True
                return
            if kind == "slow":
                time.sleep(float(arg))
            if kind == "html":
                self._send(200, b"<html><body>Bad gateway</body></html>", "text/html")
                return
            dimension = int(arg) if kind == "dim" else state.dimension
            vectors = HashingEncoder(dimension, normalize=False)._encode(body["input"]) + state.shift
            rows = [[float(x) for x in v] for v in vectors]
            if kind == "nan":
                rows[0][0] = float("nan")
            if kind == "fewer":
                rows = rows[:-1]
            if kind == "vary":
                rows[-1] = rows[-1][:-1]
            payload = {
                "object": "list",
                "model": body["model"],
                "data": [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)],
                "usage": {
                    "prompt_tokens": sum(len(t.split()) for t in body["input"]),
                    "total_tokens": sum(len(t.split()) for t in body["input"]),
                },
            }
            self._send(200, json.dumps(payload).replace("NaN", "NaN").encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def _spec(service, **changes) -> EndpointSpec:
    return EndpointSpec(**{"url": service.url, "backoff": 0.01, "timeout": 2.0, **changes})


def _config(tiny_beir, service, tmp_path, **changes) -> EvaluateConfig:
    return EvaluateConfig(
        tiny_beir,
        model="openai:hash-64",
        output_dir=tmp_path / "out",
        progress=False,
        cache_dir=tmp_path / "cache",
        endpoint=_spec(service, batch_size=2, concurrency=2),
        k_values=(1, 3),
        **changes,
    )


def test_metrics_equal_the_local_encoder_and_a_rerun_sends_nothing(tiny_beir, service, tmp_path):
    local = evaluate_dataset(
        EvaluateConfig(tiny_beir, model="hash:64", output_dir=None, progress=False, cache=False, k_values=(1, 3))
    ).result
    first = evaluate_dataset(_config(tiny_beir, service, tmp_path)).result
    assert first.metrics == local.metrics
    usage = first.config["endpoint_usage"]
    assert usage["requests"] == len(service.requests) >= 4 and usage["tokens"] > 0
    assert max(service.requests) <= 2  # the batch size
    assert first.label == "openai:hash-64 [127.0.0.1-" + service.url.split(":")[2].split("/")[0] + "]"
    sent = len(service.requests)
    again = evaluate_dataset(_config(tiny_beir, service, tmp_path)).result
    assert len(service.requests) == sent and again.config["endpoint_usage"]["requests"] == 0
    assert again.metrics == first.metrics and again.config["embedding_cache"] == "hit"
    text = "".join(p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file())
    assert KEY not in text


def test_the_key_is_sent_never_written_and_a_missing_key_is_one_line(tiny_beir, service, tmp_path, monkeypatch):
    service.key = KEY
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            "openai:hash-64",
            "--endpoint",
            service.url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1
    assert (
        "HTTP 401 for model hash-64 (no API key: set $OPENAI_API_KEY, or name the variable with --api-key-env)"
        in result.stderr
    )
    monkeypatch.setenv("MY_KEY", KEY)
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            "openai:hash-64",
            "--endpoint",
            service.url,
            "--api-key-env",
            "MY_KEY",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
            "-v",
            "--price-per-1m-tokens",
            "0.02",
        ],
    )
    assert result.exit_code == 0, result.output
    assert KEY not in result.output
    written = "".join(p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file())
    assert KEY not in written and '"cost":' in written
    recorded = json.loads(next((tmp_path / "out").rglob("test*.json")).read_text())
    assert recorded["config"]["endpoint_usage"]["cost"] == recorded["cost"]["endpoint"]["cost"]


def test_the_cost_record_and_report_cost_carry_the_tokens_and_their_price(tiny_beir, service, tmp_path):
    spec = _spec(service, batch_size=2, concurrency=2, price_per_1m_tokens=0.02)
    result = evaluate_dataset(
        EvaluateConfig(
            tiny_beir,
            model="openai:hash-64",
            output_dir=tmp_path / "out",
            progress=False,
            cache_dir=tmp_path / "cache",
            endpoint=spec,
            k_values=(1, 3),
        )
    ).result
    usage = result.cost["endpoint"]
    assert usage == result.config["endpoint_usage"] and usage["requests"] == len(service.requests)
    assert usage["tokens"] > 0 and usage["cost"] == round(usage["tokens"] * 0.02 / 1e6, 6)  # to the micro-unit
    shown = invoke(["report", str(tmp_path / "out"), "--cost", "--format", "csv", "--metric", "nDCG@3"])
    assert shown.exit_code == 0, shown.output
    row = next(csv.DictReader(io.StringIO(shown.output)))
    assert int(row["tokens"]) == usage["tokens"] and float(row["price"]) == usage["cost"]
    markdown = invoke(["report", str(tmp_path / "out"), "--cost", "--metric", "nDCG@3"]).output
    assert "| tokens | price |" in markdown.splitlines()[0]


def test_retries_honour_retry_after_and_survive_500s_drops_and_slow_answers(tiny_beir, service, tmp_path, monkeypatch):
    from harness.io import service as client

    service.behaviours = ["normal", "429:0.2", "500", "drop", "slow:3"]  # the probe, then faults
    waits, real = [], time.sleep
    monkeypatch.setattr(client.time, "sleep", lambda seconds: waits.append(seconds) or real(seconds))
    result = evaluate_dataset(_config(tiny_beir, service, tmp_path)).result
    assert 0.2 in waits  # the client's wait after the 429 is the one its Retry-After said
    assert result.config["endpoint_usage"]["retries"] == 4
    local = evaluate_dataset(
        EvaluateConfig(tiny_beir, model="hash:64", output_dir=None, progress=False, cache=False, k_values=(1, 3))
    ).result
    assert result.metrics == local.metrics


def test_a_negative_or_past_retry_after_is_no_wait(tiny_beir, service, tmp_path, monkeypatch):
    """A server's Retry-After of -5, or an HTTP date already past, means retry now (RFC 9110 gives no
    negative delay): it names no wait, so the client backs off as for any retry, never time.sleep(-5)'s ValueError."""
    from harness.io import service as client

    assert client.retry_after("-5") == 0.0
    assert client.retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    service.behaviours = ["normal", "429:-5"]  # the probe, then a 429 with a negative Retry-After
    waits, real = [], time.sleep
    monkeypatch.setattr(client.time, "sleep", lambda seconds: waits.append(seconds) or real(seconds))
    result = evaluate_dataset(_config(tiny_beir, service, tmp_path)).result
    assert waits == [0.01]  # no wait named (0 s): the first backoff of `_spec`, never a negative sleep
    assert result.config["endpoint_usage"]["retries"] == 1


def test_a_changed_model_behind_the_name_is_reported_and_never_mixed(tiny_beir, service, tmp_path):
    config = _config(tiny_beir, service, tmp_path, chunk_size=2)
    evaluate_dataset(config)
    entries = sorted(p.name for p in (tmp_path / "cache" / "embeddings").iterdir())
    service.shift = 0.5  # another model behind the same name
    evaluate_dataset(config)  # everything cached: no request, the remembered identity is trusted
    (tmp_path / "tiny2").mkdir()
    other = tmp_path / "tiny2"
    import shutil

    shutil.copytree(tiny_beir, other, dirs_exist_ok=True)
    with open(other / "corpus.jsonl", "a") as handle:
        handle.write('{"_id": "d9", "title": "", "text": "a new document"}\n')
    with pytest.raises(EndpointError, match="now answers the probe with other vectors .* rerun to embed everything"):
        evaluate_dataset(_config(other, service, tmp_path))
    rerun = evaluate_dataset(_config(other, service, tmp_path)).result  # a new identity, a new entry
    assert rerun.config["embedding_cache"] == "stored"
    assert len(list((tmp_path / "cache" / "embeddings").iterdir())) > len(entries)


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("dim:32", "vectors of dimension 32, the probe's is 64"),
        ("nan", "a vector with NaN, infinite or non-numeric values"),
        ("fewer", "1 vectors for 2 inputs"),
        ("html", "the answer is not an embeddings response (starts with '<html><body>Bad gateway"),
        ("vary", "vectors of dimension 63, 64"),
    ],
)
def test_bad_answers_stop_the_run_and_nothing_wrong_is_cached(tiny_beir, service, tmp_path, behaviour, message):
    service.behaviours = ["normal", "normal", behaviour]  # the probe, a good batch, then the bad one
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            "openai:hash-64",
            "--endpoint",
            service.url,
            "--endpoint-batch-size",
            "2",
            "--concurrency",
            "1",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
    service.behaviours = []
    rerun = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            "openai:hash-64",
            "--endpoint",
            service.url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    local = evaluate_dataset(
        EvaluateConfig(tiny_beir, model="hash:64", output_dir=None, progress=False, cache=False)
    ).result
    assert rerun.exit_code == 0 and json.loads(rerun.stdout)["metrics"] == local.metrics


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--endpoint", "ftp://example.com/v1"], "--endpoint 'ftp://example.com/v1' is not an http(s) URL"),
        ([], "an openai: model needs an endpoint: set --endpoint (or $BEIR_HARNESS_ENDPOINT)"),
        (["--endpoint", "http://127.0.0.1:9/v1", "--concurrency", "0"], "--concurrency must be at least 1"),
    ],
)
def test_bad_settings_are_one_line_before_any_request(tiny_beir, tmp_path, monkeypatch, args, message):
    monkeypatch.delenv("BEIR_HARNESS_ENDPOINT", raising=False)
    result = invoke(["evaluate", str(tiny_beir), "--model", "openai:m", *args, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_404_names_the_endpoint_and_the_model(tiny_beir, service, tmp_path):
    encoder = EndpointEncoder("openai:m", EndpointSpec(url=service.url.removesuffix("/v1"), backoff=0.01))
    with pytest.raises(EndpointError, match=r"/embeddings: HTTP 404 for model m: no such model or path"):
        encoder.encode_queries(["x"])


def test_requests_respect_the_batch_size_and_the_token_budget():
    texts = ["word " * 10] * 7  # 51 characters: 13 estimated tokens each
    assert _batches(texts, 3, 10_000) == [(0, 3), (3, 6), (6, 7)]
    assert _batches(texts, 100, 30) == [(0, 2), (2, 4), (4, 6), (6, 7)]
    assert _batches(["x" * 1000], 5, 10) == [(0, 1)]  # one text over the budget still goes, alone
