"""The CPU class table (``harness/data/cpu-classes.csv``): for each class of CPU, the runtimes' measured pace against
torch fp32 and their measured nDCG@10 move, with the host and the date each figure came from.

``--backend auto`` reads it to decide in seconds (`harness.runtimes.auto.pick_backend`): on a CPU whose class
(`harness.host.cpu_class`) has rows, the fastest candidate installed here whose quality holds is confirmed against
torch fp32 on a few batches instead of probing every runtime. Rows come only from figures measured with a command
quoted in BENCHMARKS.md; a full probe (``--backend auto --probe``, or a class without rows) logs the rows it would add
(`rows_to_add`).

Columns: ``cpu_class`` (`harness.host.cpu_class`), ``candidate`` (``torch``, ``torch bf16``, ``onnx``, ``onnx-int8``,
``openvino``, ``openvino-int8``: a runtime of `harness.runtimes.registry`, at fp32 unless a precision follows),
``vs_torch`` (its docs/s over torch fp32's, alternated on one host), ``ndcg10_delta`` (the largest |ΔnDCG@10| against
torch fp32 of its full SciFact and NFCorpus runs on that class; empty: not measured), ``host``, ``date`` (ISO) and
``source`` (the BENCHMARKS.md section and command).
"""

from __future__ import annotations

import csv
import datetime
import importlib.resources
import io
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from harness.errors import HarnessError
from harness.runtimes.registry import BY_NAME, TORCH

NDCG_BOUND = 0.003  # |ΔnDCG@10| against torch fp32 on SciFact and NFCorpus that a table pick must have kept
COLUMNS = ("cpu_class", "candidate", "vs_torch", "ndcg10_delta", "host", "date", "source")
PRECISIONS = ("fp32", "bf16")
TABLE = "data/cpu-classes.csv"


@dataclass(frozen=True)
class ClassRow:
    """One measured runtime on one CPU class."""

    cpu_class: str
    backend: str
    precision: str
    vs_torch: float
    ndcg10_delta: float | None
    host: str
    date: str
    source: str

    @property
    def candidate(self) -> str:
        """``torch``, ``torch bf16``, ``onnx-int8``... (`harness.runtimes.auto.Candidate.name`)."""
        return self.backend if self.precision == "fp32" else f"{self.backend} {self.precision}"

    def record(self) -> dict[str, Any]:
        """What a result keeps of the row its pick came from."""
        return {
            "candidate": self.candidate,
            "vs_torch": self.vs_torch,
            "ndcg10_delta": self.ndcg10_delta,
            "host": self.host,
            "date": self.date,
        }


def parse_table(text: str, where: str = TABLE) -> dict[str, list[ClassRow]]:
    """Class → its rows, fastest first, from the CSV `text`.

    Raises:
        HarnessError: One line naming `where`, the line and the fault: a column missing, an unknown runtime or
            precision, a ratio that is not a positive number, a delta that is not a number, an empty host or source,
            a date that is not ISO, a class measured twice for one candidate or without its torch fp32 row.
    """
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise HarnessError(f"{where}: the header must be {','.join(COLUMNS)}, got {','.join(reader.fieldnames or ())}")
    table: dict[str, list[ClassRow]] = {}
    for line, values in enumerate(reader, start=2):
        table.setdefault(values["cpu_class"], []).append(_row(values, f"{where}:{line}"))
    for name, rows in table.items():
        seen = [row.candidate for row in rows]
        twice = sorted({candidate for candidate in seen if seen.count(candidate) > 1})
        if twice:
            raise HarnessError(f"{where}: class {name!r} lists {', '.join(twice)} more than once; keep one row each")
        if TORCH not in seen:
            raise HarnessError(f"{where}: class {name!r} has no {TORCH} row (the reference, vs_torch 1)")
        rows.sort(key=lambda row: (-row.vs_torch, row.candidate))
    return table


def _row(values: dict[str, str], where: str) -> ClassRow:
    if any(values.get(column) is None for column in COLUMNS):
        raise HarnessError(f"{where}: {len(COLUMNS)} columns expected ({','.join(COLUMNS)})")
    backend, _, precision = values["candidate"].strip().partition(" ")
    precision = precision or "fp32"
    if backend not in BY_NAME:
        raise HarnessError(f"{where}: unknown runtime {backend!r}; use one of {', '.join(BY_NAME)}")
    if precision not in PRECISIONS:
        raise HarnessError(f"{where}: unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    try:
        ratio = float(values["vs_torch"])
        delta = float(values["ndcg10_delta"]) if values["ndcg10_delta"].strip() else None
    except ValueError:
        raise HarnessError(f"{where}: vs_torch and ndcg10_delta must be numbers (ndcg10_delta may be empty)") from None
    if not ratio > 0 or (delta is not None and not delta >= 0):
        raise HarnessError(f"{where}: vs_torch must be positive and ndcg10_delta not negative")
    if backend == TORCH and precision == "fp32" and ratio != 1:
        raise HarnessError(f"{where}: torch fp32 is the reference: vs_torch 1, got {ratio}")
    for column in ("cpu_class", "host", "source"):
        if not values[column].strip():
            raise HarnessError(f"{where}: {column} is empty; every row names where its figure was measured")
    try:
        datetime.date.fromisoformat(values["date"].strip())
    except ValueError:
        raise HarnessError(f"{where}: date {values['date']!r} is not an ISO date (YYYY-MM-DD)") from None
    return ClassRow(
        values["cpu_class"].strip(),
        backend,
        precision,
        ratio,
        delta,
        values["host"].strip(),
        values["date"].strip(),
        values["source"].strip(),
    )


@lru_cache(maxsize=1)
def class_table() -> dict[str, list[ClassRow]]:
    """The shipped table (package data), parsed once."""
    return parse_table(importlib.resources.files("harness").joinpath(TABLE).read_text(encoding="utf-8"))


def class_rows(cpu: str | None = None) -> list[ClassRow]:
    """The table's rows for CPU class `cpu` (default this machine's, `harness.host.local_cpu_class`), fastest
    first; empty for a class it does not list."""
    from harness.host import local_cpu_class

    return list(class_table().get(cpu or local_cpu_class(), []))


def quality_holds(row: ClassRow, needs_measured: bool) -> bool:
    """Whether `row`'s runtime may be picked from the table on its class: its measured |ΔnDCG@10| within
    `NDCG_BOUND`; not measured, only for a runtime whose closeness the confirmation's cosine can vouch for (not
    `needs_measured`: a runtime calibrated on a sample, whose nDCG a cosine on a few texts cannot promise)."""
    if row.ndcg10_delta is None:
        return not needs_measured
    return row.ndcg10_delta <= NDCG_BOUND


def rows_to_add(cpu: str, rows: list[dict[str, Any]], host: str, date: str, source: str) -> list[str]:
    """The CSV lines a full probe's `rows` (`harness.runtimes.auto.measure`'s) would add for class `cpu`: the
    nDCG@10 column left empty (a probe measures cosines, not nDCG)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([cpu, row["backend"], f"{row['vs_torch']:.2f}", "", host, date, source])
    return out.getvalue().splitlines()
