"""``--backend auto`` decided from the CPU class table (``harness/data/cpu-classes.csv``): the table is validated
(every runtime it names is one of the registry's, every row has its host and date); a known class loads torch fp32
and the table's pick only, and confirms the pick on one batch (a pick slower than torch there gives way to torch,
the reason recorded); an unknown class, or ``--probe``, runs the full probe and offers the rows the table would gain.

Speeds are a fake clock's (the fake encoders advance it), loads are counted: nothing here is timed."""

from __future__ import annotations

import csv
import datetime
import importlib.resources
import json
import re
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.runtimes import auto, classes
from harness.runtimes.auto import Candidate, pick_backend
from harness.runtimes.classes import COLUMNS, ClassRow, parse_table
from harness.runtimes.registry import BY_NAME

WORDS = "apple banana cherry date fig grape kiwi lemon mango melon olive peach pear plum".split()
CANDIDATES = [Candidate("torch"), Candidate("onnx"), Candidate("onnx-int8"), Candidate("openvino")]
SAMPLE = [" ".join(WORDS[: 3 + i % 5]) for i in range(96)]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Timed:
    """Encodes to fixed vectors (a tilt moves them off the reference) at `per_text` fake seconds a text."""

    def __init__(self, clock: Clock, per_text: float, tilt: float = 0.0):
        self.clock, self.per_text, self.tilt = clock, per_text, tilt
        self.base = np.random.default_rng(0).normal(size=(200, 16))

    def encode_docs(self, texts):
        self.clock.now += self.per_text * len(texts)
        vectors = self.base[: len(texts)].copy()
        vectors[:, 0] += self.tilt * np.abs(vectors).sum(axis=1)
        return vectors


def _row(candidate: str, ratio: float, delta: float | None = None, cpu: str = "test-class") -> ClassRow:
    backend, _, precision = candidate.partition(" ")
    return ClassRow(cpu, backend, precision or "fp32", ratio, delta, "host T", "2026-12-06", "a test")


def _loader(costs: dict[str, float], tilts: dict[str, float] | None = None):
    """(load, the names loaded in order, the clock)."""
    clock, loaded = Clock(), []
    encoders = {name: Timed(clock, cost, (tilts or {}).get(name, 0.0)) for name, cost in costs.items()}

    def load(candidate):
        loaded.append(candidate.name)
        return encoders[candidate.name]

    return load, loaded, clock


def _pick(load, clock, table, root=None, candidates=CANDIDATES, **how):
    return pick_backend(
        {"name": "fake"}, SAMPLE, load, root, candidates, timer=clock, table=table, cpu="test-class", **how
    )


# --- the shipped table ----------------------------------------------------------------------------------------


def _shipped_rows() -> list[dict[str, str]]:
    text = importlib.resources.files("harness").joinpath("data/cpu-classes.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def test_every_row_of_the_shipped_table_names_a_runtime_of_the_registry_a_host_and_a_date():
    rows = _shipped_rows()
    assert rows and tuple(rows[0]) == COLUMNS
    for row in rows:
        backend, _, precision = row["candidate"].partition(" ")
        assert backend in BY_NAME and precision in ("", "bf16"), row
        assert row["host"].strip() and row["source"].strip() and row["cpu_class"].strip(), row
        assert datetime.date.fromisoformat(row["date"]) <= datetime.date.today(), row
        assert float(row["vs_torch"]) > 0, row
    by_class: dict[str, list[str]] = {}
    for row in rows:
        by_class.setdefault(row["cpu_class"], []).append(row["candidate"])
    for name, candidates in by_class.items():
        assert "torch" in candidates and len(candidates) == len(set(candidates)), name
    torch_rows = [row for row in rows if row["candidate"] == "torch"]
    assert all(float(row["vs_torch"]) == 1 for row in torch_rows)
    assert classes.class_table().keys() == by_class.keys()  # the parser reads every class


def test_the_shipped_table_knows_the_classes_it_was_measured_on():
    from harness.host import cpu_class

    zen4 = ["avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"]
    assert cpu_class(zen4) == "avx512-vnni+bf16" and cpu_class(zen4[:-1]) == "avx512-vnni"
    assert cpu_class(["avx", "avx2", "fma", "f16c"]) == "avx2"
    assert {"avx512-vnni+bf16", "avx2"} <= classes.class_table().keys()


# Where BENCHMARKS.md prints each figure of the shipped table: (class, candidate) → (section, the table row's first
# cell, the column) for its speed, and (section, row) for its nDCG@10 (the row's SciFact and NFCorpus columns).
# Host B's probe is printed in prose ("Host B, ...: onnx 10.0 (0.91×").
_SPEED = {
    ("avx512-vnni+bf16", "torch bf16"): ("Choosing the backend", "torch bf16", "host C, auto's probe"),
    ("avx512-vnni+bf16", "onnx"): ("Choosing the backend", "onnx", "host C, auto's probe"),
    ("avx512-vnni+bf16", "onnx-int8"): ("Choosing the backend", "onnx-int8", "host C, auto's probe"),
    ("avx512-vnni+bf16", "openvino"): ("Choosing the backend", "openvino", "host C, auto's probe"),
    ("avx512-vnni+bf16", "openvino-int8"): ("Choosing the backend", "openvino-int8, the recipe used", "run 2, loaded"),
    ("avx2", "onnx"): ("Choosing the backend", None, "Host B"),
    ("avx2", "openvino"): ("Choosing the backend", None, "Host B"),
    ("avx2", "onnx-int8"): ("Encoder backends", "E (", "int8 vs torch"),
    ("avx512-vnni", "onnx"): ("Choosing the backend", "onnx", "host F, quiet, `env --bench`"),
    ("avx512-vnni", "onnx-int8"): ("Choosing the backend", "onnx-int8", "host F, quiet, `env --bench`"),
    ("avx512-vnni", "openvino"): ("Choosing the backend", "openvino", "host F, quiet, `env --bench`"),
    ("avx512-vnni", "openvino-int8"): (
        "Choosing the backend",
        "openvino-int8, the recipe used",
        "host F, quiet, `env --bench`",
    ),
}
_NDCG = {
    ("avx512-vnni+bf16", "torch bf16"): ("OpenVINO bf16 / int8", "torch bf16"),
    ("avx512-vnni+bf16", "onnx-int8"): ("Encoder backends", "C ("),
    ("avx512-vnni+bf16", "openvino"): ("OpenVINO bf16 / int8", "`openvino`"),
    ("avx2", "onnx-int8"): ("Encoder backends", "E ("),
    ("avx512-vnni", "openvino-int8"): ("OpenVINO bf16 / int8", "the recipe used, calibrated on the shipped sample"),
}


def _benchmarks_section(title: str) -> str:
    text = (Path(__file__).parents[1] / "BENCHMARKS.md").read_text(encoding="utf-8")
    sections = [part for part in text.split("\n## ") if part.startswith(title)]
    assert len(sections) == 1, title
    return sections[0]


def _benchmarks_cell(section: str, row: str, column: str) -> str:
    """The cell of the Markdown table in `section` whose first cell starts with `row` (a whole word), under the
    header `column`."""
    lines = [line for line in _benchmarks_section(section).splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    hits = [line for line in lines[2:] if re.match(re.escape(row) + r"(?![\w-])", line.strip("| "))]
    assert len(hits) == 1, (section, row)
    return [cell.strip() for cell in hits[0].strip("|").split("|")][header.index(column)]


def _printed_ratio(section: str, row: str | None, column: str, candidate: str) -> float:
    if row is None:  # prose: "<candidate> [(fp32 there)] <docs/s> (<ratio>×"
        prose = _benchmarks_section(section).split(column, 1)[1]
        found = re.search(rf"\b{re.escape(candidate)}(?: \([^)]*\))? [\d.]+ \(\**([\d.]+)×", prose)
        assert found, (section, candidate)
        return float(found.group(1))
    return float(re.search(r"([\d.]+)×", _benchmarks_cell(section, row, column)).group(1))


def _printed_ndcg_delta(section: str, row: str) -> float:
    """The largest |ΔnDCG@10| against torch fp32 of the row's SciFact and NFCorpus figures (those measured)."""
    torch = re.search(r"torch fp32 gives ([\d.]+) / ([\d.]+)", _benchmarks_section("Encoder backends"))
    lines = [line for line in _benchmarks_section(section).splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    deltas = []
    for dataset, reference in zip(("SciFact nDCG@10", "NFCorpus nDCG@10"), torch.groups()):
        column = next(name for name in header if name.endswith(dataset))
        figure = _benchmarks_cell(section, row, column)
        if figure != "not measured":
            deltas.append(abs(float(figure.strip("*")) - float(reference)))
    return max(deltas)


def test_every_figure_of_the_shipped_table_is_the_one_its_benchmarks_section_prints():
    """A row's speed and nDCG@10 move are what the BENCHMARKS.md section it cites prints (the move recomputed from
    the printed nDCG@10 figures against torch fp32's, to the table's four decimals)."""
    for row in _shipped_rows():
        if row["candidate"] == "torch":
            continue
        key = (row["cpu_class"], row["candidate"])
        section, cell, column = _SPEED[key]
        assert row["source"].startswith(f"BENCHMARKS.md, {section}"), key
        assert float(row["vs_torch"]) == _printed_ratio(section, cell, column, row["candidate"]), key
        assert (row["ndcg10_delta"] != "") == (key in _NDCG), key
        if key in _NDCG:
            assert _NDCG[key][0] in row["source"], key
            assert float(row["ndcg10_delta"]) == pytest.approx(_printed_ndcg_delta(*_NDCG[key]), abs=5.01e-5), key


@settings(derandomize=True, deadline=None, max_examples=60)
@given(
    st.dictionaries(
        st.sampled_from(["torch bf16", "onnx", "onnx-int8", "openvino", "openvino-int8"]),
        st.sampled_from([0.5, 0.91, 1.0, 1.05, 2.2]),  # few values: ties between candidates and with torch
        min_size=1,
    )
)
def test_a_class_s_rows_are_read_fastest_first_ties_by_name(ratios):
    lines = [",".join(COLUMNS), "c,torch,1,0,h,2026-12-06,s"]
    lines += [f"c,{candidate},{ratio},,h,2026-12-06,s" for candidate, ratio in ratios.items()]
    remaining = {"torch": 1.0, **ratios}
    expected = []
    while remaining:  # the fastest left, the first name among equals
        best = min(remaining, key=lambda name: (-remaining[name], name))
        expected.append(best)
        del remaining[best]
    assert [row.candidate for row in parse_table("\n".join(lines))["c"]] == expected


def test_the_shipped_table_picks_on_each_class_the_fastest_row_whose_quality_holds():
    """On every class, with every candidate installed: the fastest row measured within 0.003 nDCG@10, or not measured
    and not openvino-int8 (whose closeness only a measured nDCG@10 vouches for), and at least 1.10x torch fp32 (else
    torch). On avx2 that is torch: openvino's 1.05x is too small a lead."""
    by_class: dict[str, list[dict[str, str]]] = {}
    for row in _shipped_rows():
        by_class.setdefault(row["cpu_class"], []).append(row)
    for cpu, rows in by_class.items():
        holding = [
            row
            for row in rows
            if (float(row["ndcg10_delta"]) <= 0.003 if row["ndcg10_delta"] else row["candidate"] != "openvino-int8")
            and (row["candidate"] == "torch" or float(row["vs_torch"]) >= 1.10)
        ]
        best = max(holding, key=lambda row: float(row["vs_torch"]))
        picked = auto.table_pick(classes.class_rows(cpu), [row["candidate"] for row in rows])
        assert picked is not None and picked.candidate == best["candidate"], cpu
    assert auto.table_pick(classes.class_rows("avx2"), ["torch", "onnx", "openvino"]).candidate == "torch"


@pytest.mark.parametrize(("ratio", "picked"), [(1.0999, "torch"), (1.10, "onnx"), (3.0, "onnx")])
def test_a_table_row_leaves_torch_only_with_a_lead_of_a_tenth(ratio, picked):
    table = [_row("onnx", ratio), _row("torch", 1, 0), _row("openvino", 0.9)]
    assert auto.table_pick(table, ["torch", "onnx", "openvino"]).candidate == picked
    bf16 = [_row("torch bf16", ratio, 0), _row("torch", 1, 0)]  # torch in another precision is held to it too
    assert auto.table_pick(bf16, ["torch", "torch bf16"]).candidate == picked.replace("onnx", "torch bf16")


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("c,torch,1,0,h,2026-12-06,s\nc,tensorflow,2,,h,2026-12-06,s", "unknown runtime 'tensorflow'"),
        ("c,torch,1,0,h,2026-12-06,s\nc,onnx fp16,2,,h,2026-12-06,s", "unknown precision 'fp16'"),
        ("c,torch,1,0,h,2026-12-06,s\nc,onnx,2,,,2026-12-06,s", "host is empty"),
        ("c,torch,1,0,h,2026-12-06,s\nc,onnx,2,,h,06/12/2026,s", "not an ISO date"),
        ("c,torch,1,0,h,2026-12-06,s\nc,onnx,fast,,h,2026-12-06,s", "must be numbers"),
        ("c,torch,1,0,h,2026-12-06,s\nc,onnx,2,,h,2026-12-06,s\nc,onnx,3,,h,2026-12-06,s", "onnx more than once"),
        ("c,onnx,2,,h,2026-12-06,s", "has no torch row"),
        ("c,torch,2,0,h,2026-12-06,s", "torch fp32 is the reference"),
    ],
)
def test_a_bad_table_row_is_one_line_naming_the_line(line, fault):
    with pytest.raises(HarnessError, match=fault) as caught:
        parse_table(",".join(COLUMNS) + "\n" + line, "t.csv")
    assert str(caught.value).startswith("t.csv")


# --- the decision -------------------------------------------------------------------------------------------------


def test_a_known_class_loads_torch_and_the_table_s_pick_only(tmp_path):
    load, loaded, clock = _loader({"torch": 0.04, "onnx": 0.03, "onnx-int8": 0.02, "openvino": 0.01})
    table = [_row("openvino", 3.4, 0.001), _row("onnx-int8", 2.2), _row("onnx", 1.4), _row("torch", 1, 0)]
    choice = _pick(load, clock, table, tmp_path)
    assert loaded == ["torch", "openvino"]  # not onnx nor onnx-int8
    assert choice["picked"] == "openvino" and choice["decision"]["path"] == "table"
    assert choice["decision"]["loads"] == 2 and choice["decision"]["cpu_class"] == "test-class"
    assert choice["table"]["candidate"] == "openvino" and choice["table"]["host"] == "host T"
    assert "confirmed here" in choice["reason"]
    confirmed = {row["backend"]: row for row in choice["candidates"]}
    assert confirmed["openvino"]["vs_torch"] == pytest.approx(4.0)
    again = _pick(load, clock, table, tmp_path)
    assert loaded == ["torch", "openvino"] and again["decision"] == {**again["decision"], "path": "cached", "loads": 0}
    assert again["picked"] == "openvino"


def test_the_confirmation_encodes_a_few_batches_not_the_probe_s_sample():
    load, _, clock = _loader({"torch": 1.0, "openvino": 0.5})
    _pick(
        load,
        clock,
        [_row("openvino", 3.4), _row("torch", 1, 0)],
        candidates=[Candidate("torch"), Candidate("openvino")],
    )
    # warm-up and one round, each encoder: (CONFIRM_WARMUP + CONFIRM_TEXTS) texts, at 1.0 and 0.5 fake s a text
    assert clock.now == pytest.approx(1.5 * (auto.CONFIRM_WARMUP + auto.CONFIRM_TEXTS))
    assert auto.CONFIRM_TEXTS < auto.PROBE_TEXTS


def test_a_pick_slower_than_torch_in_its_confirmation_gives_way_to_torch_with_the_reason(tmp_path):
    load, loaded, clock = _loader({"torch": 0.02, "openvino": 0.03})  # the table said faster; here it is not
    choice = _pick(load, clock, [_row("openvino", 3.4), _row("torch", 1, 0)], tmp_path)
    assert loaded == ["torch", "openvino"]
    assert (choice["backend"], choice["precision"], choice["picked"]) == ("torch", "fp32", "torch")
    assert "failed its confirmation" in choice["reason"] and "not faster than torch fp32" in choice["reason"]
    assert "33.3 docs/s" in choice["reason"] and "50.0" in choice["reason"]
    assert json.loads(next((tmp_path / "auto-backend").glob("*.json")).read_text())["picked"] == "torch"


def test_a_pick_whose_vectors_miss_the_bound_in_its_confirmation_gives_way_to_torch():
    load, _, clock = _loader({"torch": 0.04, "openvino": 0.01}, {"openvino": 0.5})
    choice = _pick(load, clock, [_row("openvino", 3.4), _row("torch", 1, 0)])
    assert choice["picked"] == "torch" and "mean cosine" in choice["reason"]


@pytest.mark.parametrize(("table", "loads"), [([_row("openvino", 3.4), _row("torch", 1, 0)], 2), ([], 4)])
def test_the_decision_records_the_seconds_it_took(table, loads, monkeypatch):
    """The decision's seconds are the wall clock's interval from its start to its end, to 1e-4 s: here a scripted
    wall clock that each (slow, fake) load advances by 0.61803 s."""
    import types

    wall = [1000.0]
    monkeypatch.setattr(auto, "time", types.SimpleNamespace(perf_counter=lambda: wall[0]))
    load, loaded, clock = _loader({"torch": 0.04, "onnx": 0.03, "onnx-int8": 0.02, "openvino": 0.01})

    def slow(candidate):
        wall[0] += 0.61803
        return load(candidate)

    decision = _pick(slow, clock, table)["decision"]
    assert len(loaded) == decision["loads"] == loads
    assert decision["seconds"] == pytest.approx(loads * 0.61803, abs=1e-4)


def test_a_table_ranking_torch_first_loads_nothing():
    load, loaded, clock = _loader({"torch": 0.04, "onnx": 0.05})
    choice = _pick(load, clock, [_row("torch", 1, 0), _row("onnx", 0.9)])
    assert loaded == [] and choice["picked"] == "torch" and choice["decision"]["loads"] == 0
    assert "ranks first" in choice["reason"]


def test_the_table_s_pick_is_the_fastest_installed_here():
    load, loaded, clock = _loader({"torch": 0.04, "onnx": 0.02})
    table = [_row("torch bf16", 2.6, 0.0005), _row("openvino", 3.4), _row("onnx", 1.4), _row("torch", 1, 0)]
    choice = _pick(load, clock, table, candidates=[Candidate("torch"), Candidate("onnx")])
    assert loaded == ["torch", "onnx"] and choice["picked"] == "onnx"


@pytest.mark.parametrize(
    ("delta", "picked"),
    [(None, "openvino"), (0.0025, "openvino-int8"), (0.003, "openvino-int8"), (0.0031, "openvino")],
)
def test_a_table_only_runtime_is_picked_only_where_its_measured_ndcg_holds(delta, picked):
    """openvino-int8's closeness is no cosine's to promise: its row must carry a measured |ΔnDCG@10| within 0.003."""
    assert BY_NAME["openvino-int8"].table_only is not None
    load, loaded, clock = _loader({"torch": 0.04, "openvino": 0.02, "openvino-int8": 0.01})
    table = [_row("openvino-int8", 4.6, delta), _row("openvino", 3.4), _row("torch", 1, 0)]
    candidates = [Candidate("torch"), Candidate("openvino"), Candidate("openvino-int8")]
    choice = _pick(load, clock, table, candidates=candidates)
    assert choice["picked"] == picked and loaded == ["torch", picked]


def test_an_unknown_class_runs_the_full_probe_and_offers_its_rows(caplog):
    load, loaded, clock = _loader({"torch": 0.04, "onnx": 0.03, "onnx-int8": 0.02, "openvino": 0.01})
    choice = _pick(load, clock, [])
    assert loaded == [c.name for c in CANDIDATES] and choice["decision"]["path"] == "probe"
    assert choice["picked"] == "openvino"
    offered = parse_table("\n".join([",".join(COLUMNS), *choice["table_rows"]]), "offered")
    rows = {row.candidate: row for row in offered["test-class"]}
    assert rows.keys() == {c.name for c in CANDIDATES}
    assert rows["openvino"].vs_torch == pytest.approx(4.0) and rows["openvino"].ndcg10_delta is None
    assert "would gain" in caplog.text and choice["table_rows"][0] in caplog.text


def test_probe_asked_for_runs_the_full_probe_whatever_the_table_and_the_cache_say(tmp_path):
    load, loaded, clock = _loader({"torch": 0.04, "onnx": 0.03, "onnx-int8": 0.02, "openvino": 0.01})
    table = [_row("onnx", 1.4), _row("torch", 1, 0)]
    assert _pick(load, clock, table, tmp_path)["decision"]["path"] == "table"
    loaded.clear()
    probed = _pick(load, clock, table, tmp_path, probe=True)
    assert loaded == [c.name for c in CANDIDATES] and probed["decision"]["path"] == "probe"
    assert probed["picked"] == "openvino" and _pick(load, clock, table, tmp_path)["picked"] == "openvino"  # cached


def test_the_probe_skips_a_table_only_runtime():
    load, loaded, clock = _loader({"torch": 0.04, "openvino": 0.02, "openvino-int8": 0.01})
    candidates = [Candidate("torch"), Candidate("openvino"), Candidate("openvino-int8")]
    choice = _pick(load, clock, [], candidates=candidates)
    assert loaded == ["torch", "openvino"] and choice["picked"] == "openvino"


# --- through evaluate -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tiny_bert) -> Path:
    return tiny_bert(WORDS)


def _evaluate(tiny_beir, tiny_model, tmp_path, *extra) -> dict:
    args = ["-q", "evaluate", str(tiny_beir), "--model", str(tiny_model), "--backend", "auto", *extra]
    result = invoke([*args, "--json", "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "--output-dir",
                     str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_evaluate_decides_from_the_table_and_records_the_decision_in_the_cost_record(
    tiny_model, tiny_beir, tmp_path, monkeypatch
):
    pytest.importorskip("onnxruntime")
    loads = []
    real = auto.candidate_loader

    def counted(*args, **kwargs):
        load = real(*args, **kwargs)
        return lambda candidate: loads.append(candidate.name) or load(candidate)

    monkeypatch.setattr(auto, "candidate_loader", counted)
    monkeypatch.setattr(classes, "class_rows", lambda cpu=None: [_row("onnx", 1.4), _row("torch", 1, 0)])
    result = _evaluate(tiny_beir, tiny_model, tmp_path)
    record = result["config"]["backend_auto"]
    assert record["decision"]["path"] == "table" and record["table"]["candidate"] == "onnx"
    assert sorted(set(loads)) == ["onnx", "torch"]  # torch (the fingerprint, the reference) and the pick only
    assert result["config"]["backend"] == record["backend"]  # the runtime chosen, recorded
    assert "probe_backend" in result["timings"] and record["decision"]["seconds"] >= 0
    probed = _evaluate(tiny_beir, tiny_model, tmp_path, "--probe")["config"]["backend_auto"]
    assert probed["decision"]["path"] == "probe" and "torch" in {row["backend"] for row in probed["candidates"]}


def test_the_command_line_s_default_backend_is_auto_and_the_environment_pins_another(
    tiny_model, tiny_beir, tmp_path, monkeypatch
):
    monkeypatch.delenv("BEIR_HARNESS_BACKEND", raising=False)  # conftest pins torch for the rest of the suite
    monkeypatch.setattr(classes, "class_rows", lambda cpu=None: [_row("torch", 1, 0), _row("onnx", 0.8)])
    run = ["-q", "evaluate", str(tiny_beir), "--model", str(tiny_model), "--json", "--device", "cpu", "--cache-dir",
           str(tmp_path / "cache"), "--output-dir"]  # fmt: skip
    result = invoke([*run, str(tmp_path / "default")])
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)["config"]
    assert record["backend_auto"]["decision"]["path"] == "table" and record["backend"] == "torch"
    monkeypatch.setenv("BEIR_HARNESS_BACKEND", "torch")
    pinned = invoke([*run, str(tmp_path / "pinned")])
    assert pinned.exit_code == 0, pinned.stderr
    assert "backend_auto" not in json.loads(pinned.stdout)["config"]
    monkeypatch.setenv("BEIR_HARNESS_BACKEND", "tensorflow")
    refused = invoke([*run, str(tmp_path / "refused")])
    assert refused.exit_code == 2 and "'tensorflow' is not one of" in refused.stderr
    assert not (tmp_path / "refused").exists()


def test_help_shows_auto_as_backend_s_default_and_the_variable_that_pins_another(monkeypatch):
    monkeypatch.delenv("BEIR_HARNESS_BACKEND", raising=False)
    text = " ".join(invoke(["evaluate", "--help"]).stdout.split())
    assert "[env var: BEIR_HARNESS_BACKEND; default: auto]" in text
    rerank = text[text.index("--rerank-backend [") : text.index("--sparse-backend [")]
    assert rerank.endswith("[default: torch] ")
