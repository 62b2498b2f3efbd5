"""A calibration sample of a pool: N pairs an LLM judge and a human both grade before the whole pool is paid for.

The sample is stratified: every pooled query gets ⌊N / queries⌋ pairs (the remainder one more each, to queries
drawn with the seed; a query with fewer pooled pairs gives them all, and its share goes to the others), and
inside a query the pairs are spread over the ranks: the query's documents ordered by the best rank any pool
system gave them (``runs/`` of the pool folder; documents added by hand last), and m of L taken at positions
⌊(i + ½)·L / m⌋, i = 0..m−1, so the top, the middle and the bottom of the pool are all graded. Documents that are
the text twin of another (``same_text``, graded once) are left out. `harness.judging.llm` grades the sample
(``judge --sample N``) and writes it blind (``calibration-sample.csv``, no grades) for the human.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from harness.errors import HarnessError, setting
from harness.io.formats import atomic_writer, read_run

SAMPLE_FILE = "calibration-sample.csv"
_BLIND_COLUMNS = ("query_id", "query", "doc_id", "title", "text", "grade")


def pool_ranks(pool_dir: Path, manifest: Mapping) -> dict[tuple[str, str], int]:
    """(query, doc) → the best rank (1-based) any of the pool's systems gave it (its ``runs/`` files)."""
    best: dict[tuple[str, str], int] = {}
    for system in manifest.get("systems", ()):
        path = pool_dir / str(system.get("run", ""))
        if not path.is_file():
            continue
        for query_id, ranked in read_run(path).items():
            for rank, scored in enumerate(ranked, start=1):
                key = (query_id, scored.doc_id)
                best[key] = min(best.get(key, rank), rank)
    return best


def _shares(sizes: Mapping[str, int], n: int, seed: int) -> dict[str, int]:
    """Pairs per query: as even as the sizes allow, the remainder to queries drawn with the seed."""
    shares = dict.fromkeys(sizes, 0)
    left = n
    while left > 0:
        open_queries = [q for q in sorted(sizes) if shares[q] < sizes[q]]
        if not open_queries:
            break
        each, extra = divmod(left, len(open_queries))
        lucky = set(random.Random(f"{seed}:{left}").sample(open_queries, extra)) if extra else set()
        for q in open_queries:
            give = min(sizes[q] - shares[q], each + (q in lucky))
            shares[q] += give
            left -= give
    return shares


def spread(items: Sequence, m: int) -> list:
    """m of the items, spread evenly over their order (positions ⌊(i + ½)·L / m⌋)."""
    size = len(items)
    return [items[int((i + 0.5) * size / m)] for i in range(m)] if m < size else list(items)


def calibration_sample(
    rows: Sequence[Mapping[str, str]], ranks: Mapping[tuple[str, str], int], n: int, seed: int = 0
) -> list[Mapping[str, str]]:
    """The stratified sample of `n` of the pool's `rows` (see the module), in pool order.

    Raises:
        HarnessError: `n` below 1, or below the number of pooled queries (every query must be in the sample).
    """
    by_query: dict[str, list[Mapping[str, str]]] = {}
    for row in rows:
        by_query.setdefault(row["query_id"], []).append(row)
    if n < len(by_query):
        raise HarnessError(
            f"{setting('sample')} {n}: fewer pairs than the pool's {len(by_query)} queries; give at least "
            f"{len(by_query)} so every query is in the sample (or judge the whole pool without --sample)"
        )
    shares = _shares({q: len(r) for q, r in by_query.items()}, n, seed)
    chosen = set()
    for query_id, query_rows in by_query.items():
        ordered = sorted(query_rows, key=lambda r: (ranks.get((query_id, r["doc_id"]), float("inf")), r["doc_id"]))
        chosen.update((query_id, r["doc_id"]) for r in spread(ordered, shares[query_id]))
    return [row for row in rows if (row["query_id"], row["doc_id"]) in chosen]


def write_blind_sample(pool_dir: Path, rows: Iterable[Mapping[str, str]]) -> Path:
    """The sample without grades, for the human (``calibration-sample.csv``: the pool's columns, grade empty)."""
    path = pool_dir / SAMPLE_FILE
    with atomic_writer(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=_BLIND_COLUMNS, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**row, "grade": ""} for row in rows)
    return path
