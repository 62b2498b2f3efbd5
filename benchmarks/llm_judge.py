"""LLM judging throughput: `beir-harness judge --llm` against a loopback chat-completions server.

Figures: BENCHMARKS.md, "LLM judging throughput against a loopback chat-completions server".

Usage (from the repository root):

    python benchmarks/llm_judge.py [--pairs 400] [--latency-ms 50] [--rounds 2]
    python benchmarks/llm_judge.py --smoke     # seconds: 32 pairs, 1 round

Starts a `/v1/chat/completions` server in a separate process (a threaded http.server that waits
`--latency-ms` per request, as a hosted model's time to answer, then answers ``##final score: N``), pools
a synthetic dataset into `--pairs` pairs, and grades the pool with `harness.judging.llm.judge_pool` at
concurrency 1, 4 and 16, each from an empty cache; then once more from the full cache (no request).
The concurrencies are measured in turn within each round (1, 4, 16, 1, 4, 16, ...), best of `--rounds`,
so a loaded machine slows them alike. Prints pairs/s and the share of the ideal (concurrency / latency).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402


def serve(port: int, latency: float) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall between them

        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(latency)
            grade = len(body["messages"][-1]["content"]) % 4
            payload = json.dumps(
                {
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": f"##final score: {grade}"}}],
                    "usage": {"total_tokens": 300},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    class Server(ThreadingHTTPServer):
        request_queue_size = 128  # the default listen backlog (5) drops connections when 16 open at once
        daemon_threads = True

    server = Server(("127.0.0.1", port), Handler)
    server.serve_forever()


def wait_for(port: int, server: subprocess.Popen, seconds: float = 30.0) -> None:
    """Return once the server accepts connections."""
    import socket

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and server.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the loopback server on port {port} did not start")


def make_pool(work: Path, pairs: int) -> Path:
    """A pool of `pairs` pairs: a synthetic dataset, one run of 10 documents per query, depth 10."""
    from harness.judging.pool import PoolSources, PoolSpec, build_pool

    queries = max(1, pairs // 10)
    folder = _smoke.synthetic_beir(work / "data", docs=max(300, 2 * pairs), queries=queries)
    lines = [
        f"q{q} Q0 d{(q * 37 + r * 11) % max(300, 2 * pairs)} 0 {10 - r} sys" for q in range(queries) for r in range(10)
    ]
    (work / "run.trec").write_text("\n".join(lines) + "\n")
    shutil.rmtree(folder / "qrels")  # nothing judged yet: every pooled pair is to judge
    build_pool(folder, PoolSources(run_files=(work / "run.trec",)), work / "pool", PoolSpec(depth=10))
    return work / "pool"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="seconds, 32 pairs, 1 round: proves the script runs")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.latency_ms / 1000)
        return
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.pairs, args.rounds = 32, 1
    import socket

    from harness.io.service import EndpointSpec
    from harness.judging.llm import JudgeSpec, judge_pool

    work = _smoke.scratch("llm-judge")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--latency-ms", str(args.latency_ms)])
    try:
        wait_for(port, server)
        pool = make_pool(work, args.pairs)
        n = sum(1 for _ in open(pool / "pool.jsonl", encoding="utf-8"))
        print(
            f"{n} pairs, the server answers each request after {args.latency_ms:.0f} ms; best of {args.rounds} "
            "rounds, the concurrencies alternated"
        )
        best: dict[int, float] = {}
        for round_no in range(args.rounds):
            for concurrency in (1, 4, 16):
                spec = JudgeSpec(
                    "openai:bench",
                    EndpointSpec(url=f"http://127.0.0.1:{port}/v1", concurrency=concurrency),
                    cache_dir=work / f"cache-{round_no}-{concurrency}",
                )
                started = time.perf_counter()
                report = judge_pool(pool, spec)
                seconds = time.perf_counter() - started
                assert len(report.grades) == n and report.usage["requests"] == n, report.format_text()
                best[concurrency] = max(best.get(concurrency, 0.0), n / seconds)
        for concurrency, rate in best.items():
            ideal = concurrency / (args.latency_ms / 1000)
            print(
                f"  concurrency {concurrency:>2}: {rate:8.1f} pairs/s  ({rate / ideal:5.1%} of the ideal "
                f"{ideal:.0f} pairs/s)"
            )
        started = time.perf_counter()
        report = judge_pool(pool, spec)  # the last cache is full: a rerun sends nothing
        seconds = time.perf_counter() - started
        print(f"  rerun from the cache: {n / seconds:8.1f} pairs/s, {report.usage['requests']} requests")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
