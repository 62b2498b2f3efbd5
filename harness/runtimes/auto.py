"""``--backend auto``: the fastest installed backend that stays close to torch fp32 on this machine, decided in seconds.

On a CPU whose class (`harness.host.cpu_class`) the shipped table lists (`harness.runtimes.classes`), auto takes the
fastest candidate installed here whose measured quality holds there, and confirms it against torch fp32 on one batch
of the corpus's first texts (`confirm`: about `CONFIRM_TEXTS` texts each, seconds): a pick that is slower than torch
there, or whose vectors miss the cosine bounds below, gives way to torch fp32, the reason recorded. Only torch fp32
and the pick are loaded. A class the table does not list, or ``--backend auto --probe``, runs the full probe below,
and its rows are logged as the lines the table would gain (`harness.runtimes.classes.rows_to_add`). Either way the
decision, its path (``table``, ``probe``, ``cached``), the loads it made and its seconds are recorded
(``decision``), and the choice is cached per host, model and runtime versions.

The probe encodes a fixed sample of the corpus's own texts with every candidate, alternated round by round (so a
slow-down of the machine hits them all; `measure`, which `beir-harness env --bench` uses too), and compares each
candidate's vectors with torch fp32's on that sample. A candidate is eligible when its mean cosine is at least
`MEAN_COSINE_BOUND` and its smallest at least `MIN_COSINE_BOUND`; the fastest eligible one is picked (`choose`),
torch fp32 when none is. The choice is cached per host, model fingerprint and runtime versions (`probe_key`), so a
second run probes nothing.

Why these bounds (BENCHMARKS.md, host C): the backends whose full nDCG@10 is within 0.002 of torch fp32 on
SciFact and NFCorpus measured mean / min cosines of 1.0000 (onnx, openvino), 0.9999 (torch bf16) and 0.9949 / 0.9899
(onnx-int8); openvino-int8's first recipe, which missed the bound on NFCorpus (−0.0040), measured 0.9924 / 0.9854. A
mean of 0.994 admits onnx-int8 and refuses that; 0.98 for the worst text catches a runtime that breaks a few texts
only. The probe never measures openvino-int8 (`EXCLUDED`, its record's `table_only`): a recipe measured 0.9965 /
0.9908, inside these bounds, with a full SciFact run outside a 0.002 nDCG bound (+0.0025) — the cosine on a short
sample cannot promise it — so only the class table picks it, where its row carries a measured nDCG@10 within
`harness.runtimes.classes.NDCG_BOUND`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.host import host_info, local_cpu_class, matmul_precisions, versions
from harness.io.cache import content_key
from harness.runtimes.classes import ClassRow, quality_holds, rows_to_add
from harness.runtimes.registry import BY_NAME, RUNTIMES, TORCH

logger = logging.getLogger(__name__)

MEAN_COSINE_BOUND = 0.994
MIN_COSINE_BOUND = 0.98
PROBE_TEXTS = 96  # the first texts of the corpus: enough for a stable ratio, seconds on a CPU
PROBE_ROUNDS = 2
CHECK_MIN_DOCS = 4 * PROBE_TEXTS  # a corpus encode this long says more of a pick's pace than the probe did
CONFIRM_TEXTS = 32  # the confirmation: one batch of the corpus's first texts each for torch fp32 and the pick
CONFIRM_WARMUP = 4  # texts each encodes first (first-call allocations, lazy kernels)
# A table row leaves torch fp32 only with at least this lead: a smaller one is within one host's spread between two
# quiet `env --bench` runs (torch fp32 33.2 and 29.0 docs/s on host F), and an export costs seconds the lead may not
# repay (BENCHMARKS.md, "Choosing the backend").
MIN_TABLE_GAIN = 1.10
# The runtimes auto never picks (`Runtime.not_auto`), and those it picks only from the table (`Runtime.table_only`).
NEVER = {record.name: record.not_auto for record in RUNTIMES if record.not_auto is not None}
EXCLUDED = {**NEVER, **{record.name: record.table_only for record in RUNTIMES if record.table_only is not None}}
PRECISIONS = ("fp32", "bf16")  # the precisions a candidate may have
PROBE_VERSION = 2  # bump when the probe's rules change: older cached choices are then probed again


@dataclass(frozen=True)
class Candidate:
    """One (backend, precision) pair that auto may pick."""

    backend: str
    precision: str = "fp32"

    @property
    def name(self) -> str:
        """``torch``, ``torch bf16``, ``onnx-int8``... as `env --bench` names them."""
        return self.backend if self.precision == "fp32" else f"{self.backend} {self.precision}"


REFERENCE = Candidate(TORCH)


def native_bf16(flags: Sequence[str]) -> bool:
    """Whether a CPU with `flags` computes bf16 natively (AVX512-BF16, AMX-BF16, ARM BF16: `harness.host.BF16_FLAGS`):
    only then is torch bf16 a candidate."""
    return "bf16" in matmul_precisions(flags)


def installed_candidates(bf16: bool | None = None, flags: Sequence[str] | None = None) -> list[Candidate]:
    """The candidates whose runtime is installed here and whose precision this CPU computes natively (a record's
    `auto_needs`; torch bf16 only with native bf16), torch fp32 (the reference) first; the table-only ones among
    them (`Runtime.table_only`), which the probe skips. `flags`: the CPU's (default this host's)."""
    flags = host_info()["cpu_flags"] if flags is None else flags
    found = [REFERENCE]
    if native_bf16(flags) if bf16 is None else bf16:
        found.append(Candidate(TORCH, "bf16"))
    native = matmul_precisions(flags)
    found += [
        Candidate(record.name)
        for record in RUNTIMES
        if record.build is not None and record.installed() and (record.auto_needs or "fp32") in native
    ]
    return [candidate for candidate in found if candidate.backend not in NEVER]


def probed(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The `candidates` the full probe measures: the table-only ones left out."""
    return [candidate for candidate in candidates if candidate.backend not in EXCLUDED]


def measure(
    encoders: dict[str, Any],
    sample: list[str],
    rounds: int = PROBE_ROUNDS,
    batch_size: int = 32,
    timer: Callable[[], float] = time.perf_counter,
    reference: str = TORCH,
    warmup: int | None = None,
) -> list[dict[str, Any]]:
    """Encode `sample` with every encoder, alternated round by round after one warm-up batch each (of `warmup`
    texts; default `batch_size`).

    Returns:
        One row per encoder: ``backend``, ``docs_per_s``, ``vs_torch`` (speed ratio to `reference`), and
        ``cosine_mean`` / ``cosine_min`` of its vectors to `reference`'s.
    """
    import numpy as np

    seconds = dict.fromkeys(encoders, 0.0)
    vectors: dict[str, Any] = {}
    for encoder in encoders.values():
        encoder.encode_docs(sample[: warmup or batch_size])  # warm-up: first-call allocations, lazy kernels
    for _ in range(rounds):
        for name, encoder in encoders.items():
            started = timer()
            vectors[name] = np.asarray(encoder.encode_docs(sample), dtype=np.float32)
            seconds[name] += max(timer() - started, 1e-9)
    base = vectors[reference] / np.linalg.norm(vectors[reference], axis=1, keepdims=True)
    rows = []
    for name in encoders:
        cosine = (vectors[name] / np.linalg.norm(vectors[name], axis=1, keepdims=True) * base).sum(axis=1)
        rows.append(
            {
                "backend": name,
                "docs_per_s": rounds * len(sample) / seconds[name],
                "vs_torch": seconds[reference] / seconds[name],
                "cosine_mean": float(cosine.mean()),
                "cosine_min": float(cosine.min()),
            }
        )
    return rows


def choose(rows: list[dict[str, Any]], candidates: Sequence[Candidate]) -> dict[str, Any]:
    """The fastest row that meets both cosine bounds (torch fp32 when none but it does), with why.

    Returns:
        ``backend``, ``precision``, ``picked`` (the candidate's name), ``reason`` (one sentence) and ``candidates``
        (each row with ``eligible`` and, when not, ``why``).
    """
    by_name = {candidate.name: candidate for candidate in candidates}
    judged = []
    for row in rows:
        why = []
        if not row["cosine_mean"] >= MEAN_COSINE_BOUND:  # NaN (a zero vector) fails too
            why.append(f"mean cosine {row['cosine_mean']:.4f} < {MEAN_COSINE_BOUND}")
        if not row["cosine_min"] >= MIN_COSINE_BOUND:
            why.append(f"min cosine {row['cosine_min']:.4f} < {MIN_COSINE_BOUND}")
        judged.append({**row, "eligible": not why, **({"why": "; ".join(why)} if why else {})})
    eligible = [row for row in judged if row["eligible"] and row["backend"] != REFERENCE.name]
    best = max(eligible, key=lambda row: row["docs_per_s"], default=None)
    reference = next(row for row in judged if row["backend"] == REFERENCE.name)
    if best is None or best["docs_per_s"] <= reference["docs_per_s"]:
        picked = REFERENCE
        reason = (
            "no candidate met the quality bound (mean cosine ≥ {0}, min ≥ {1}): torch fp32".format(
                MEAN_COSINE_BOUND, MIN_COSINE_BOUND
            )
            if best is None
            else "torch fp32 was the fastest"
        )
    else:
        picked = by_name[best["backend"]]
        reason = (
            f"{picked.name} was the fastest within the bound: {best['docs_per_s']:.1f} docs/s "
            f"({best['vs_torch']:.2f}x torch fp32), cosine to torch fp32 mean {best['cosine_mean']:.4f} / "
            f"min {best['cosine_min']:.4f}"
        )
    return {
        "backend": picked.backend,
        "precision": picked.precision,
        "picked": picked.name,
        "reason": reason,
        "bounds": {"cosine_mean": MEAN_COSINE_BOUND, "cosine_min": MIN_COSINE_BOUND},
        "excluded": dict(EXCLUDED),
        "candidates": judged,
    }


def probe_key(model_fingerprint: dict[str, Any], candidates: Sequence[Candidate], threads: int | None = None) -> str:
    """The cache key of a probe: this host (and the threads it may use), the model, the runtimes' versions, the
    candidates and the probe's rules."""
    host = host_info(threads)
    return content_key(
        {
            "probe": PROBE_VERSION,
            "texts": PROBE_TEXTS,
            "rounds": PROBE_ROUNDS,
            "host": {name: host[name] for name in ("cpu", "machine", "os", "cores_used", "cpu_flags")},
            "model": model_fingerprint,
            "versions": versions(),
            "candidates": [candidate.name for candidate in candidates],
            "bounds": [MEAN_COSINE_BOUND, MIN_COSINE_BOUND],
        }
    )


def _cached(path: Path) -> dict[str, Any] | None:
    """The cached choice at `path`; None (with a warning) when it is damaged, so the caller probes again."""
    if not path.is_file():
        return None
    try:
        choice = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(choice, dict) or not {"backend", "precision", "picked", "candidates"} <= choice.keys():
            raise ValueError("fields missing")
        if choice["backend"] not in BY_NAME or choice["backend"] in NEVER or choice["precision"] not in PRECISIONS:
            raise ValueError(f"no such candidate: {choice['backend']!r} {choice['precision']!r}")
        return choice
    except (ValueError, UnicodeDecodeError) as exc:
        logger.warning("%s: damaged --backend auto probe cache (%s); probing again", path, exc)
        return None


def pick_backend(
    fingerprint: dict[str, Any],
    sample: list[str],
    load: Callable[[Candidate], Any],
    cache_root: Path | None,
    candidates: Sequence[Candidate] | None = None,
    timer: Callable[[], float] = time.perf_counter,
    batch_size: int = 32,
    threads: int | None = None,
    table: Sequence[ClassRow] | None = None,
    probe: bool = False,
    cpu: str | None = None,
) -> dict[str, Any]:
    """Decide (or recall) the backend auto picks for the model of `fingerprint` on this host.

    Args:
        fingerprint: The torch fp32 model's fingerprint (keys the cache; no model is loaded for a cached choice).
        sample: The corpus's first `PROBE_TEXTS` texts (the confirmation encodes the first `CONFIRM_TEXTS`).
        load: Loads a candidate's encoder (`REFERENCE` first: torch fp32).
        cache_root: Where choices are kept (None: not cached).
        candidates: Default `installed_candidates()`.
        timer: The clock of the encodes compared (tests pass a fake one).
        threads: The threads the evaluation is limited to (part of the cache key; None: all usable cores).
        table: The rows of this CPU's class in the class table (`harness.runtimes.classes`); None or empty: the
            class is unknown, and the full probe decides.
        probe: Run the full probe whatever the table and the cache hold (``--backend auto --probe``).
        cpu: This CPU's class, as the decision records it (default `harness.host.local_cpu_class`).

    Returns:
        `choose`'s record, plus ``probe`` (texts, rounds, key, ``cached``) and ``decision`` (``path``: table, probe
        or cached; ``cpu_class``; ``loads``: the candidates loaded; ``seconds``: wall seconds deciding). A table
        decision adds ``table`` (the row picked and where it was measured) and a probe ``table_rows`` (the lines the
        table would gain for this class).
    """
    started = time.perf_counter()
    cpu = cpu or local_cpu_class()
    candidates = list(candidates or installed_candidates())
    key = probe_key(fingerprint, candidates, threads)
    path = cache_root / "auto-backend" / f"{key}.json" if cache_root is not None else None
    choice = _cached(path) if path is not None and not probe else None
    if choice is not None:
        logger.info("--backend auto: %s (decided earlier on this host: %s)", choice["picked"], path)
        return {
            **choice,
            "probe": {**choice.get("probe", {}), "cached": True},
            "decision": _decision("cached", cpu, 0, started),
        }
    loads = [0]

    def counted(candidate: Candidate) -> Any:
        loads[0] += 1
        return load(candidate)

    if table and not probe:
        choice = _from_table(cpu, table, candidates, sample, counted, timer, batch_size)
        how = "table"
    else:
        measured = probed(candidates)
        encoders = {candidate.name: counted(candidate) for candidate in measured}
        rows = measure(encoders, sample, batch_size=batch_size, timer=timer)
        choice = {**choose(rows, measured), "probe": {"texts": len(sample), "rounds": PROBE_ROUNDS}}
        choice["table_rows"] = _offered(cpu, rows)
        how = "probe"
    choice["probe"] = {**choice["probe"], "key": key}
    logger.info("--backend auto: %s (%s)", choice["picked"], choice["reason"])
    if path is not None:
        _write_choice(path, choice)
    return {**choice, "probe": {**choice["probe"], "cached": False}, "decision": _decision(how, cpu, loads[0], started)}


def _decision(path: str, cpu: str, loads: int, started: float) -> dict[str, Any]:
    return {"path": path, "cpu_class": cpu, "loads": loads, "seconds": round(time.perf_counter() - started, 4)}


def _offered(cpu: str, rows: list[dict[str, Any]]) -> list[str]:
    """The probe's rows as the class table's lines, logged for a maintainer to add (measured, not yet quoted)."""
    import datetime

    host = host_info()
    lines = rows_to_add(
        cpu, rows, f"{host['cpu']}, {host['cores_used']} cores", datetime.date.today().isoformat(), "auto --probe"
    )
    logger.warning(
        "--backend auto probed class %s; the CPU class table (harness/data/cpu-classes.csv) would gain, once "
        "its nDCG@10 is measured and the figures quoted in BENCHMARKS.md:\n%s",
        cpu,
        "\n".join(lines),
    )
    return lines


def _from_table(
    cpu: str,
    table: Sequence[ClassRow],
    candidates: Sequence[Candidate],
    sample: list[str],
    load: Callable[[Candidate], Any],
    timer: Callable[[], float],
    batch_size: int,
) -> dict[str, Any]:
    """The table's fastest candidate installed here whose quality holds on class `cpu`, confirmed against torch fp32
    on one batch (`confirm`); torch fp32, loading nothing, when the table ranks it first."""
    installed = {candidate.name: candidate for candidate in candidates}
    best = table_pick(table, installed)
    bounds = {"cosine_mean": MEAN_COSINE_BOUND, "cosine_min": MIN_COSINE_BOUND}
    base = {"bounds": bounds, "excluded": dict(NEVER), "probe": {"texts": 0, "rounds": 0}}
    if best is None or best.candidate == REFERENCE.name:
        why = "no faster candidate installed here" if best is None else f"it ranks first ({best.host}, {best.date})"
        return {
            **base,
            **moot(f"the CPU class table's choice for {cpu}: torch fp32 ({why})"),
            "candidates": [],
            "table": {"cpu_class": cpu, **(best.record() if best is not None else {})},
        }
    pick = installed[best.candidate]
    rows = confirm({REFERENCE.name: load(REFERENCE), pick.name: load(pick)}, sample, timer, batch_size)
    choice = choose(rows, [REFERENCE, pick])
    source = f"the CPU class table's pick for {cpu} ({best.vs_torch:.2f}x torch fp32 on {best.host}, {best.date})"
    if choice["picked"] == pick.name:
        choice["reason"] = f"{source}, confirmed here: {choice['reason']}"
    else:
        measured = next(row for row in choice["candidates"] if row["backend"] == pick.name)
        what = measured.get("why") or (
            f"{measured['docs_per_s']:.1f} docs/s, not faster than torch fp32's "
            f"{measured['docs_per_s'] / measured['vs_torch']:.1f}"
        )
        choice["reason"] = f"{source} failed its confirmation here ({what}): torch fp32"
    confirmed = {"texts": min(len(sample), CONFIRM_TEXTS), "rounds": 1}
    return {**choice, "excluded": dict(NEVER), "probe": confirmed, "table": {"cpu_class": cpu, **best.record()}}


def table_pick(table: Sequence[ClassRow], installed: Iterable[str]) -> ClassRow | None:
    """The first row of a class's `table` (fastest first) whose candidate is `installed` (names), whose quality
    holds (`harness.runtimes.classes.quality_holds`) and which is torch fp32 or at least `MIN_TABLE_GAIN` times as
    fast; None when none is."""
    names = set(installed)
    usable = (
        row
        for row in table
        if row.candidate in names
        and quality_holds(row, BY_NAME[row.backend].table_only is not None)
        and (row.candidate == REFERENCE.name or row.vs_torch >= MIN_TABLE_GAIN)
    )
    return next(usable, None)


def confirm(
    encoders: dict[str, Any],
    sample: list[str],
    timer: Callable[[], float] = time.perf_counter,
    batch_size: int = 32,
) -> list[dict[str, Any]]:
    """`measure` on the first `CONFIRM_TEXTS` texts of `sample`, one round after a `CONFIRM_WARMUP`-text warm-up:
    the table's pick against torch fp32 in seconds."""
    texts = sample[:CONFIRM_TEXTS]
    return measure(encoders, texts, rounds=1, batch_size=batch_size, timer=timer, warmup=CONFIRM_WARMUP)


def _write_choice(path: Path, choice: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(choice, indent=1), encoding="utf-8")
    partial.replace(path)  # a killed run leaves no half-written choice


def observe_pick(
    choice: dict[str, Any], docs_encoded: int | None, seconds: float, cache_root: Path | None
) -> str | None:
    """Check the probe's pick against the run: when it encoded at least `CHECK_MIN_DOCS` corpus texts in `seconds`
    at a pace below torch fp32's in the probe (on the same host, minutes before, over texts the run sorts by
    length, which speeds every backend), the probe misled, and this host's cached choice becomes torch fp32 with
    the observation (`demoted`): a later run probes nothing and runs torch. A pick that kept its pace, torch
    itself or a short encode changes nothing. A run of a recalled choice is held to the
    probe's paces too; a pick barely faster than torch in the probe may be demoted by the run's own overheads
    (hashing, writing chunks), which costs little.

    Returns:
        The note the result records, or None.
    """
    probe = choice.get("probe") or {}
    reference = next((row for row in choice.get("candidates", []) if row.get("backend") == REFERENCE.name), None)
    if choice.get("picked") == REFERENCE.name or reference is None or "key" not in probe:
        return None
    if docs_encoded is None or docs_encoded < CHECK_MIN_DOCS or seconds <= 0:
        return None
    pace = docs_encoded / seconds
    if pace >= reference["docs_per_s"]:
        return None
    observed = {"docs": docs_encoded, "seconds": round(seconds, 4), "docs_per_s": pace}
    note = (
        f"--backend auto's pick {choice['picked']} encoded {docs_encoded:,} corpus texts at {pace:.1f} docs/s, "
        f"slower than torch fp32 in the probe ({reference['docs_per_s']:.1f} docs/s)"
    )
    if cache_root is None:
        return note + "; the probe's choice is not cached here, so nothing is kept of this"
    path = cache_root / "auto-backend" / f"{probe['key']}.json"
    reason = f"{note}: torch fp32 from then on"  # a recall marks its probe cached (`pick_backend`)
    _write_choice(path, {**choice, **moot(reason), "demoted": {choice["picked"]: observed}})
    return f"{note}; this host's cached choice is now torch fp32 ({path}; remove it to probe again)"


def moot(reason: str) -> dict[str, Any]:
    """The choice where nothing is probed (a model on a GPU, one given loaded, an empty corpus): torch fp32."""
    return {"backend": REFERENCE.backend, "precision": REFERENCE.precision, "picked": REFERENCE.name, "reason": reason}


def candidate_loader(spec: Any, model: str, root: Path, threads: int | None = None) -> Callable[[Candidate], Any]:
    """Loads each candidate of a probe of `model` with the settings of `spec` (an `EncoderSpec`) on the CPU: the
    torch fp32 model once, when first needed (a cached choice needs none), and each fp32 runtime wrapped around it
    (no second load); a candidate of another precision loads on its own."""
    reference: list = []

    def load(candidate: Candidate) -> Any:
        if not reference:
            reference.append(replace(spec, backend=REFERENCE.backend).load(model, "cpu", root))
        if candidate == REFERENCE:
            return reference[0]
        if candidate.precision == REFERENCE.precision:
            return BY_NAME[candidate.backend].wrap(reference[0], root, threads=threads)
        return replace(spec, backend=candidate.backend, precision=candidate.precision).load(
            model, "cpu", root, threads=threads
        )

    return load


def reference_fingerprint(spec: Any, model: str, root: Path, cache: bool, load: Callable[[Candidate], Any]) -> dict:
    """The torch fp32 model's fingerprint for the probe's cache key: remembered under a cheap key of its files
    (`harness.io.cache.model_files_key`), so a run whose choice is cached loads no model for it."""
    from harness.io.cache import model_files_key, recall_fingerprint, remember_fingerprint
    from harness.retrieval.models import resolve_model_source

    settings = {"model": model, **replace(spec, backend=REFERENCE.backend).to_config(), "for": "auto probe"}
    key = model_files_key(resolve_model_source(model), settings) if cache else None
    remembered = recall_fingerprint(root, key) if key else None
    if remembered is not None and isinstance(remembered.get("fingerprint"), dict):
        return remembered["fingerprint"]
    fingerprint = load(REFERENCE).fingerprint()
    if key:
        remember_fingerprint(root, key, {"fingerprint": fingerprint})
    return fingerprint
