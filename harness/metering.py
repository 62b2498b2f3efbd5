"""What a run cost, measured: per-query search latency on a sample, percentiles, peak memory, bytes on disk.

These helpers know nothing of models or indexes; the pipeline calls them and the result stores what they
return in its cost record (`harness.reporting.report.Result.cost`; the fields are defined in docs/outputs.md).

**Search latency** is measured apart from the search itself, which runs every query in one batch (the
throughput a batch evaluation gets, the ``search`` phase): afterwards a fixed sample of at most
`LATENCY_SAMPLE` queries, evenly spaced over the judged queries in file order, is searched again **one query
at a time**, and each query's wall time is one latency (`LATENCY_DEFINITION`). The probe stops early once it
has spent `LATENCY_BUDGET` (a tenth) of the batch search's time (at least `LATENCY_FLOOR_SECONDS`), so it adds at
most about that; the number of queries measured is recorded with the percentiles.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LATENCY_SAMPLE = 100
LATENCY_BUDGET = 0.1  # at most this × the batch search's seconds (1.0 doubled a streamed MS MARCO-size search:
# every query alone reads all the vectors; BENCHMARKS.md)...
LATENCY_FLOOR_SECONDS = 1.0  # ...or this, whichever is larger
LATENCY_DEFINITION = (
    "wall time of searching one query alone (query vector or text in, ranked list out; query "
    "encoding excluded), on an evenly spaced sample of the judged queries, after the batch search"
)
QUANTILES = (50, 95, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0–100) by linear interpolation between closest ranks (numpy's default method).

    Raises:
        ValueError: No values.
    """
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def sample_positions(n: int, sample: int = LATENCY_SAMPLE) -> list[int]:
    """At most `sample` positions in range(n), evenly spaced, the first included (no randomness to seed)."""
    m = min(n, sample)
    if m <= 0:
        return []
    return [i * n // m for i in range(m)]


def search_latencies(
    search_one: Callable[[int], object], n_queries: int, batch_seconds: float, sample: int = LATENCY_SAMPLE
) -> list[float]:
    """Seconds of `search_one(position)` for each sampled query position, within the probe's time budget.

    Args:
        search_one: Searches the query at a position of the query list alone.
        n_queries: How many queries there are.
        batch_seconds: What the batch search of all of them took (sets the budget).
        sample: Most queries measured.
    """
    budget = max(LATENCY_FLOOR_SECONDS, LATENCY_BUDGET * batch_seconds)
    seconds: list[float] = []
    for position in sample_positions(n_queries, sample):
        started = time.perf_counter()
        search_one(position)
        seconds.append(time.perf_counter() - started)
        if sum(seconds) > budget:
            break
    return seconds


def latency_record(seconds: Sequence[float], n_queries: int) -> dict[str, Any]:
    """What a result stores of the probe: the per-query milliseconds and their p50/p95/p99 (computed from the
    stored, rounded values, so anyone can recompute them from the file)."""
    per_query = [round(s * 1000, 4) for s in seconds]
    record: dict[str, Any] = {"definition": LATENCY_DEFINITION, "queries": len(per_query), "of": n_queries}
    if per_query:
        record.update({f"p{q}_ms": round(percentile(per_query, q), 4) for q in QUANTILES})
        record["mean_ms"] = round(sum(per_query) / len(per_query), 4)
    record["per_query_ms"] = per_query
    return record


def peak_rss() -> dict[str, int | None]:
    """Peak resident memory in bytes: of this process since it started or since the last `reset_high_water`
    (``self``), and of the largest child process it has waited for (``children``: worker processes; 0 when none
    ran). None where the platform has no `resource` module (Windows).

    ``self`` is the kernel's high-water mark of this process image (``VmHWM``) where ``/proc`` has it: Linux's
    ``ru_maxrss`` keeps, across ``exec``, the size of the process it was forked from, so a small command
    started by a 2 GB parent (a test runner, a notebook) would report 2 GB. ``children`` is ``ru_maxrss``'s
    and may carry the same overcount for a child started by a large process.
    """
    try:
        import resource
    except ImportError:
        return {"self": None, "children": None}
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    own = high_water_bytes()
    return {
        "self": own if own is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
        "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale,
    }


def reset_high_water() -> bool:
    """Start this process's peak resident set (``VmHWM``) again from its present size, so that the next
    `high_water_bytes` is the peak of what ran since (Linux: ``5`` written to ``/proc/self/clear_refs``). False
    where the platform does not allow it: peaks then count from the process's start."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def high_water_bytes() -> int | None:
    """This process image's peak resident set (``VmHWM`` of ``/proc/self/status``), or None without ``/proc``."""
    return proc_bytes("/proc/self/status", "VmHWM")


def proc_bytes(path: str, field: str) -> int | None:
    """A ``FIELD:  N kB`` line of a Linux ``/proc`` file (``/proc/meminfo``, ``/proc/self/status``), in bytes;
    None where the file or the field is missing (no ``/proc``: macOS, Windows). The one reader of them."""
    try:
        with open(path, encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class MeasuredRun:
    """A Python child run by `run_measured`: its exit status, its output, and its own peak memory in bytes."""

    returncode: int
    stdout: str
    stderr: str
    peak_bytes: int | None  # the child's own high-water mark (VmHWM), read by the child as it exits
    peak_anon_bytes: int | None  # the largest anonymous resident set (RssAnon) seen while it ran, sampled


# The measured child's first code: registers the exit hook, then runs what it was asked to (`run_as_measured`).
LAUNCHER = "import sys; from harness.metering import run_as_measured; run_as_measured(sys.argv[1], sys.argv[2:])"


def run_measured(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    sample_seconds: float = 0.02,
) -> MeasuredRun:
    """Run ``python ARGS`` (a script and its arguments, ``-c CODE ...`` or ``-m MODULE ...``) in a fresh
    interpreter and measure the child's own peak memory: the one way every benchmark measures it.

    The child reports its own ``VmHWM`` as it exits (`run_as_measured`), the high-water mark of its own
    process image. Not ``ru_maxrss`` (of ``RUSAGE_SELF`` in the child or ``RUSAGE_CHILDREN`` here): Linux
    carries that over ``fork`` and ``exec``, so a small child started by a 2 GB parent reports 2 GB. While it
    runs, this process samples the child's anonymous memory (``RssAnon``: its resident set less the pages of
    mapped files, which the kernel can drop and read again) every `sample_seconds`. Either figure is None
    where ``/proc`` is missing (macOS, Windows); `peak_bytes` falls back to the last sample when the child
    dies before its exit hook runs.
    """
    import subprocess
    import tempfile
    import threading

    fd, report = tempfile.mkstemp(prefix="beir-harness-peak-")
    os.close(fd)
    seen = {"VmHWM": None, "RssAnon": None}
    stop = threading.Event()
    try:
        with subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, report, *args],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:

            def sample() -> None:
                while not stop.is_set():
                    for field in seen:
                        value = proc_bytes(f"/proc/{proc.pid}/status", field)
                        if value is not None:
                            seen[field] = max(value, seen[field] or 0)
                    stop.wait(sample_seconds)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                stdout, stderr = proc.communicate()
            finally:
                stop.set()
                sampler.join()
        text = Path(report).read_text(encoding="ascii").strip()
    finally:
        Path(report).unlink(missing_ok=True)
    peak = int(text) if text.isdigit() else seen["VmHWM"]
    return MeasuredRun(proc.returncode, stdout, stderr, peak, seen["RssAnon"])


def run_as_measured(report: str, args: Sequence[str]) -> None:
    """The child's side of `run_measured`: write this process's ``VmHWM`` into the file `report` at exit (the
    last exit hook to run), then run ``python ARGS`` as the interpreter would (``sys.argv`` and, for a script,
    its folder first on ``sys.path``)."""
    import atexit
    import runpy

    def write_peak() -> None:
        peak = high_water_bytes()
        Path(report).write_text("" if peak is None else str(peak), encoding="ascii")

    atexit.register(write_peak)  # registered first, so it runs last
    args = list(args)
    if args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    elif args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path.insert(0, str(Path(args[0]).resolve().parent))
        runpy.run_path(args[0], run_name="__main__")


def tree_bytes(paths: Iterable[Path | None]) -> int:
    """Bytes on disk of these files and folders (folders counted with everything inside; missing ones as 0)."""
    total = 0
    for path in {Path(p) for p in paths if p is not None}:
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            for folder, _, names in os.walk(path):
                total += sum((Path(folder) / name).stat().st_size for name in names if (Path(folder) / name).is_file())
    return total


def per_second(count: int, seconds: float) -> float | None:
    """`count` / `seconds`, rounded to 0.1, or None when nothing was timed (a cached or skipped phase)."""
    return round(count / seconds, 1) if seconds > 0 and count else None
