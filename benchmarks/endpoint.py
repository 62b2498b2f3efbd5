"""Embedding services: the harness's own throughput against a loopback OpenAI-compatible server.

Figures: BENCHMARKS.md, "Embedding services: the harness's throughput against a loopback endpoint".

Usage (from the repository root):

    python benchmarks/endpoint.py [--texts 20000] [--batch-size 64]
    python benchmarks/endpoint.py --smoke     # seconds: 256 texts

Starts a `/v1/embeddings` server in a separate process (a threaded http.server answering with the hashing
encoder, 384 dimensions: it costs the server little, so the figures are the client's overhead — HTTP,
JSON, checks — plus the server's), then embeds `--texts` short texts through `EndpointEncoder` with
concurrency 1, 4 and 16. Prints texts/s, requests/s and wall time per request.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402


def serve(port: int) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from harness.retrieval.encode import HashingEncoder

    model = HashingEncoder(384, normalize=False)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            vectors = model._encode(body["input"])
            payload = json.dumps(
                {
                    "data": [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
                    "usage": {"total_tokens": sum(len(t.split()) for t in body["input"])},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def wait_for(port: int, server: subprocess.Popen, seconds: float = 30.0) -> None:
    """Return once the server accepts connections (it imports the harness first)."""
    import socket

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and server.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the loopback server on port {port} did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="seconds, 256 texts: proves the script runs")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.texts = 256
    import socket

    from harness.retrieval.endpoint import EndpointEncoder, EndpointSpec

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        wait_for(port, server)
        texts = [f"query number {i} about protein folding and cell {i % 97} growth" for i in range(args.texts)]
        print(f"{args.texts:,} texts of {len(texts[0].split())} words, {args.batch_size} per request, 384 dimensions")
        for concurrency in (1, 4, 16):
            encoder = EndpointEncoder(
                "openai:hash",
                EndpointSpec(url=f"http://127.0.0.1:{port}/v1", batch_size=args.batch_size, concurrency=concurrency),
            )
            encoder.fingerprint()  # the probe
            started = time.perf_counter()
            encoder.encode_docs(texts)
            seconds = time.perf_counter() - started
            requests = encoder.client.requests - 1
            print(
                f"  concurrency {concurrency:>2}: {args.texts / seconds:8.0f} texts/s  {requests / seconds:6.1f} "
                f"requests/s  {1000 * seconds / requests:6.1f} ms per request (wall)"
            )
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
