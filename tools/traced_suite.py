#!/usr/bin/env python
"""The whole test suite under one ``strace -f``: every network call of every process it starts, counted.

Usage (from the repository root; needs strace)::

    python tools/traced_suite.py [PYTEST ARGS ...]

The suite runs on the real network (not in CI's loopback-only namespace), so a leak shows as a connect to an
outside address instead of failing for want of a route. Every process is followed: the pytest process, the
command-line children, Ray's daemons, Chromium, the OpenVINO/NNCF path. It prints the number of processes, the
executables they ran, the network calls seen, and each call that left loopback (a call the kernel refused for
want of a route, ``ENETUNREACH``/``EADDRNOTAVAIL``, is counted apart: it sent nothing). Exit status: pytest's, or
1 when a call left loopback.

Tests that run strace themselves (the per-kind traces of ``tests/test_network_guard.py`` and the benchmark
smoke runs of ``tests/test_benchmarks_smoke.py``) cannot run under another tracer (a process has one tracer);
they are left out here, and CI runs them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from tracing import NETWORK_CALLS, non_loopback_targets, strace  # noqa: E402

SELF_TRACING = [
    "--ignore=tests/test_benchmarks_smoke.py",
    "--deselect=tests/test_network_guard.py::test_the_strace_parser_flags_what_leaves_loopback",
    "--deselect=tests/test_network_guard.py::test_a_ray_local_cluster_never_leaves_loopback",
    "--deselect=tests/test_network_guard.py::test_the_browser_tests_never_leave_loopback",
    "--deselect=tests/test_network_guard.py::test_openvino_int8_sends_nothing_and_writes_nothing_under_home",
    "--deselect=tests/test_network_guard.py::test_importing_openvino_the_harness_way_declines_its_telemetry",
]
_EXEC = re.compile(r'^(?:\[pid\s+)?(\d+)\]?\s+execve\("([^"]+)"')


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="traced-suite-") as scratch:
        trace = Path(scratch) / "trace.txt"
        command = [strace(), "-f", "-qq", "--seccomp-bpf", "-s", "120", "-e", f"trace={NETWORK_CALLS},execve"]
        command += ["-o", str(trace), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        status = subprocess.call([*command, *SELF_TRACING, *argv], cwd=ROOT)
        text = trace.read_text(errors="replace")
    lines = text.splitlines()
    executables = Counter(Path(m[2]).name for m in map(_EXEC.match, lines) if m and m.string.rstrip().endswith("= 0"))
    pids = {line.split()[0].strip("[pid]") for line in lines if line.strip()}
    network = [line for line in lines if re.search(rf"^\S+\s+({NETWORK_CALLS.replace(',', '|')})\(", line)]
    sent = non_loopback_targets(text)
    left = non_loopback_targets(text, unreachable_ok=True)
    print(f"pytest exit status: {status}")
    print(f"processes traced: {len(pids)}; network calls: {len(network)}")
    print("executables run: " + ", ".join(f"{name} x{n}" for name, n in executables.most_common()))
    print(f"calls outside loopback: {len(sent)} ({len(sent) - len(left)} refused for want of a route, sent nothing)")
    for line in left:
        print(f"  LEFT LOOPBACK: {line}")
    return status or (1 if left else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
