"""``--backend auto``: the choice logic under a fake clock, and a real probe on a tiny random-weight model
(cached per host and model, recorded in the result, hashed as the picked backend's configuration)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.runtimes import auto
from harness.runtimes.auto import Candidate, measure, pick_backend

WORDS = "apple banana cherry date fig grape kiwi lemon mango melon olive peach pear plum".split()


class Clock:
    """A fake timer that the fake encoders advance: speed is exactly what the test says."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Timed:
    """Encodes to fixed vectors (reference + a tilt) and costs `per_text` fake seconds per text."""

    def __init__(self, clock: Clock, per_text: float, tilt: float, seed: int = 0):
        self.clock, self.per_text, self.tilt = clock, per_text, tilt
        self.base = np.random.default_rng(seed).normal(size=(200, 16))

    def encode_docs(self, texts):
        self.clock.now += self.per_text * len(texts)
        vectors = self.base[: len(texts)].copy()
        vectors[:, 0] += self.tilt * np.abs(vectors).sum(axis=1)  # a larger tilt, a smaller cosine to the reference
        return vectors

    def fingerprint(self):
        return {"name": "fake", "per_text": self.per_text}


@pytest.fixture(autouse=True)
def unknown_class(monkeypatch):
    """This host's CPU class as one the class table does not list: auto probes (`tests/test_auto_classes.py` holds
    the table's path)."""
    from harness.runtimes import classes

    monkeypatch.setattr(classes, "class_rows", lambda cpu=None: [])


CANDIDATES = [
    Candidate("torch"),
    Candidate("torch", "bf16"),
    Candidate("onnx"),
    Candidate("onnx-int8"),
    Candidate("openvino"),
]


def _encoders(clock, costs: dict[str, float], tilts: dict[str, float]):
    return {name: Timed(clock, costs[name], tilts.get(name, 0.0)) for name in costs}


def _cosines(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Row cosines by a plain loop (independent of `measure`)."""
    return np.array([float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(reference, other)])


def test_fastest_within_the_bound_is_picked_under_a_fake_clock(tmp_path):
    """openvino is fastest but tilted out of the bound; onnx-int8 is the fastest that meets it."""
    clock = Clock()
    costs = {"torch": 0.04, "torch bf16": 0.02, "onnx": 0.03, "onnx-int8": 0.015, "openvino": 0.01}
    tilts = {"openvino": 0.5, "onnx-int8": 0.01}
    encoders = _encoders(clock, costs, tilts)
    sample = [" ".join(WORDS[: 3 + i % 5]) for i in range(64)]
    reference = encoders["torch"].encode_docs(sample)
    expected = {}
    for name, encoder in encoders.items():
        cosine = _cosines(reference, encoder.encode_docs(sample))
        expected[name] = cosine.mean() >= 0.994 and cosine.min() >= 0.98
    assert not expected["openvino"] and expected["onnx-int8"]  # the test's premise
    fastest = min((name for name in costs if expected[name]), key=costs.get)
    choice = pick_backend(
        encoders["torch"].fingerprint(), sample, lambda c: encoders[c.name], tmp_path, CANDIDATES, timer=clock
    )
    assert choice["picked"] == fastest == "onnx-int8"
    assert (choice["backend"], choice["precision"]) == ("onnx-int8", "fp32")
    rows = {row["backend"]: row for row in choice["candidates"]}
    assert rows["onnx-int8"]["docs_per_s"] == pytest.approx(1 / 0.015)
    assert rows["openvino"]["vs_torch"] == pytest.approx(4.0)
    assert not rows["openvino"]["eligible"] and "mean cosine" in rows["openvino"]["why"]


def test_measure_alternates_rounds_and_times_each_backend():
    clock, order = Clock(), []

    class Logged(Timed):
        def encode_docs(self, texts):
            order.append(self.per_text)
            return super().encode_docs(texts)

    encoders = {"torch": Logged(clock, 2.0, 0.0), "onnx": Logged(clock, 1.0, 0.0)}
    rows = measure(encoders, ["a"] * 10, rounds=2, batch_size=4, timer=clock)
    assert order == [2.0, 1.0, 2.0, 1.0, 2.0, 1.0]  # warm-up, then A B A B
    assert [round(row["docs_per_s"], 6) for row in rows] == [0.5, 1.0]


def test_auto_without_a_candidate_within_the_bound_runs_torch_fp32(tmp_path, caplog):
    """Every candidate tilted out of the bound: torch fp32, and the reason says so."""
    clock = Clock()
    costs = {"torch": 0.04, "onnx": 0.01, "openvino": 0.01}
    encoders = _encoders(clock, costs, {"onnx": 0.5, "openvino": 0.5})
    chosen = [Candidate("torch"), Candidate("onnx"), Candidate("openvino")]
    choice = pick_backend(
        encoders["torch"].fingerprint(), ["x"] * 32, lambda c: encoders[c.name], None, chosen, timer=clock
    )
    assert (choice["backend"], choice["precision"]) == ("torch", "fp32")
    assert choice["reason"].startswith("no candidate met the quality bound")


def test_openvino_int8_is_never_probed():
    assert all(candidate.backend != "openvino-int8" for candidate in auto.probed(auto.installed_candidates(bf16=True)))


def test_damaged_probe_cache_is_probed_again(tmp_path, caplog):
    clock = Clock()
    encoders = _encoders(clock, {"torch": 0.04, "onnx": 0.01}, {})
    chosen = [Candidate("torch"), Candidate("onnx")]
    fingerprint, load = encoders["torch"].fingerprint(), lambda c: encoders[c.name]
    first = pick_backend(fingerprint, ["x"] * 16, load, tmp_path, chosen, timer=clock)
    path = tmp_path / "auto-backend" / f"{first['probe']['key']}.json"
    again = pick_backend(fingerprint, ["x"] * 16, load, tmp_path, chosen, timer=clock)
    assert not first["probe"]["cached"] and again["probe"]["cached"] and again["picked"] == "onnx"
    foreign = {**again, "precision": "fp16"}  # whole JSON, but not a choice auto could make
    for damaged in ('{"backend": "onn', json.dumps(foreign)):
        path.write_text(damaged, encoding="utf-8")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            reprobed = pick_backend(fingerprint, ["x"] * 16, load, tmp_path, chosen, timer=clock)
        assert not reprobed["probe"]["cached"] and reprobed["picked"] == "onnx"
        assert "damaged --backend auto probe cache" in caplog.text and str(path) in caplog.text
        assert json.loads(path.read_text(encoding="utf-8"))["backend"] == "onnx"


@pytest.fixture(scope="module")
def tiny_model(tiny_bert) -> Path:
    """A 2-layer BERT bi-encoder (mean pooling, normalized) with random weights over this file's words."""
    return tiny_bert(WORDS)


def _evaluate(tiny_beir, tiny_model, tmp_path, backend: str, out: str) -> dict:
    result = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            str(tiny_model),
            "--backend",
            backend,
            "--json",
            "--device",
            "cpu",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_real_probe_is_cached_recorded_and_hashed_as_the_pick(tiny_model, tiny_beir, tmp_path, monkeypatch):
    """The probe's choice is recorded; a rerun recalls it and loads no model at all (choice and vectors cached); the
    configuration hash is the picked backend's, named explicitly."""
    from harness.retrieval import encode

    first = _evaluate(tiny_beir, tiny_model, tmp_path, "auto", "a")
    record = first["config"]["backend_auto"]
    assert not record["probe"]["cached"] and record["probe"]["texts"] == 5  # the tiny corpus has 5 documents
    names = {row["backend"] for row in record["candidates"]}
    assert "torch" in names and "openvino-int8" not in names
    assert any(note.startswith(f"--backend auto picked {record['picked']}") for note in first["notes"])
    real_load = encode.load_encoder
    monkeypatch.setattr(encode, "load_encoder", lambda *a, **k: pytest.fail("a model was loaded"))
    second = _evaluate(tiny_beir, tiny_model, tmp_path, "auto", "b")
    monkeypatch.setattr(encode, "load_encoder", real_load)
    assert (
        second["config"]["backend_auto"]["probe"]["cached"]
        and second["config"]["backend_auto"]["picked"] == record["picked"]
    )
    assert second["config"]["embedding_cache"] == "hit"
    named = ["--backend", record["backend"]] + (
        ["--precision", record["precision"]] if record["precision"] != "fp32" else []
    )
    result = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            str(tiny_model),
            *named,
            "--json",
            "--device",
            "cpu",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "c"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    explicit = json.loads(result.stdout)
    assert explicit["config_hash"] == first["config_hash"] == second["config_hash"]
    assert explicit["config"]["embedding_cache"] == "hit"


def test_auto_where_nothing_meets_the_bound_runs_torch_with_a_note(tiny_model, tiny_beir, tmp_path, monkeypatch):
    monkeypatch.setattr(auto, "MEAN_COSINE_BOUND", 1.5)  # no vector is that close: every candidate fails
    result = _evaluate(tiny_beir, tiny_model, tmp_path, "auto", "a")
    record = result["config"]["backend_auto"]
    assert (record["backend"], record["precision"]) == ("torch", "fp32")
    assert any("no candidate met the quality bound" in note for note in result["notes"])
    assert result["config"]["backend"] == "torch"


def test_auto_with_a_precision_is_one_line(tiny_beir, tmp_path):
    """auto picks the precision itself: naming one too is refused before anything loads or is written."""
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--backend",
            "auto",
            "--precision",
            "bf16",
            "--output-dir",
            str(tmp_path / "out"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
    )
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: --backend auto picks the precision too; leave --precision at fp32, or name the backend"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache" / "auto-backend").exists()


def test_bench_with_auto_probes_per_cell_and_skips_a_finished_cell(tiny_model, tiny_beir, tmp_path, monkeypatch):
    """bench does not preload an `auto` model (it would have no runtime): each cell's evaluation probes or recalls.
    A second bench finds the cell's result under the backend the remembered probe picked, and skips it (no model
    loaded, nothing rewritten)."""
    from harness.retrieval import encode

    def bench():
        return invoke(
            [
                "bench",
                "--models",
                str(tiny_model),
                "--datasets",
                str(tiny_beir),
                "--backend",
                "auto",
                "--device",
                "cpu",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--output-dir",
                str(tmp_path / "out"),
            ],
        )

    result = bench()
    assert result.exit_code == 0, result.stderr
    assert "1 cells: 1 done, 0 skipped" in result.stdout
    path = next((tmp_path / "out").glob("*/*/*.json"))
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["config"]["backend_auto"]["picked"] in {
        row["backend"] for row in stored["config"]["backend_auto"]["candidates"]
    }
    assert stored["config"]["backend"] == stored["config"]["backend_auto"]["backend"]
    written = path.stat().st_mtime_ns
    monkeypatch.setattr(encode, "load_encoder", lambda *a, **k: pytest.fail("a model was loaded"))
    again = bench()
    assert again.exit_code == 0, again.stderr
    assert "1 cells: 0 done, 1 skipped" in again.stdout
    assert path.stat().st_mtime_ns == written


@pytest.mark.parametrize("flags", [["avx2"], ["avx2", "avx512_bf16"]])
def test_env_bench_says_what_auto_would_pick(flags):
    """The bench table's last line applies auto's rules to its rows: openvino-int8 never, torch bf16 only where
    native, the fastest row within both cosine bounds."""
    from harness.pipeline.environment import format_bench

    rows = [
        {"backend": name, "docs_per_s": rate, "vs_torch": rate / 10, "cosine_mean": mean, "cosine_min": low}
        for name, rate, mean, low in [
            ("torch", 10, 1, 1),
            ("onnx-int8", 20, 0.9946, 0.9899),
            ("openvino-int8", 50, 0.9999, 0.999),
            ("torch bf16", 30, 0.9999, 0.9999),
            ("openvino", 25, 0.993, 0.99),
        ]
    ]
    host = {"cpu": "test", "kernel_class": "x", "cpu_flags": flags, "cores_used": 2}
    expected = "torch bf16" if "avx512_bf16" in flags else "onnx-int8"  # openvino: mean cosine under 0.994
    assert format_bench(rows, host, 8).splitlines()[-1].startswith(f"--backend auto would pick: {expected} (")


@settings(derandomize=True, deadline=None, max_examples=40)
@given(
    st.permutations(["torch", "onnx-int8", "openvino-int8", "openvino", "torch bf16"]),
    st.lists(st.sampled_from([None, 0.001, 0.0029, 0.0031, 0.01]), min_size=5, max_size=5),
    st.lists(st.integers(1, 60), min_size=5, max_size=5),
    st.sets(st.sampled_from(["onnx-int8", "openvino-int8", "openvino", "torch bf16"])),
)
def test_env_bench_on_a_class_the_table_lists_says_the_table_s_pick_and_whether_its_rows_confirm_it(
    order, deltas, rates, missing
):
    """On a listed class, the last line is what auto does there: the table's first usable row (installed here,
    quality within 0.003, a calibrated runtime only with a measured delta), kept only when these rows show it
    faster than torch fp32 within both cosine bounds; never the probe's rule over every row."""
    from harness.pipeline.environment import format_bench
    from harness.runtimes import classes

    table = [
        classes.ClassRow("k", *(name.split(" ") + ["fp32"])[:2], 2.0, delta, "h", "2026-12-01", "s")
        for name, delta in zip(order, deltas)
    ]
    measured = [name for name in order if name not in missing]
    cosines = {"torch": (1, 1), "onnx-int8": (0.9946, 0.9899), "openvino": (0.993, 0.99)}
    rows = [
        {
            "backend": name,
            "docs_per_s": float(rate),
            "vs_torch": rate / dict(zip(order, rates))["torch"],
            "cosine_mean": cosines.get(name, (0.9999, 0.999))[0],
            "cosine_min": cosines.get(name, (0.9999, 0.999))[1],
        }
        for name, rate in zip(order, rates)
        if name in measured
    ]
    host = {"cpu": "test", "kernel_class": "k", "cpu_flags": ["avx2"], "cores_used": 2}
    # Brute force: the first row (fastest first, as the table is) that is measured here and within the bound.
    bound, calibrated = 0.003, {"openvino-int8"}
    first = next(
        (
            row.candidate
            for row in table
            if row.candidate in measured
            and (row.ndcg10_delta <= bound if row.ndcg10_delta is not None else row.candidate not in calibrated)
        ),
        "torch",
    )
    rate = {row["backend"]: row for row in rows}
    faster = first != "torch" and rate[first]["docs_per_s"] > rate["torch"]["docs_per_s"]
    close = first != "torch" and rate[first]["cosine_mean"] >= 0.994 and rate[first]["cosine_min"] >= 0.98
    expected = first if faster and close else "torch"
    with mock.patch.object(classes, "class_rows", lambda cpu=None: table if cpu == "k" else []):
        line = format_bench(rows, host, 8).splitlines()[-1]
    assert line.startswith(f"--backend auto would pick: {expected} (the CPU class table's pick for k"), line


@pytest.mark.parametrize("model", ["bm25", "hash:16"])
def test_auto_with_a_first_stage_without_weights_probes_nothing(model, tiny_beir, tmp_path):
    result = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            model,
            "--backend",
            "auto",
            "--json",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "backend_auto" not in json.loads(result.stdout)["config"]
    assert not (tmp_path / "cache" / "auto-backend").exists()


def test_auto_on_an_empty_corpus_is_the_usual_one_line(tiny_model, tiny_beir, tmp_path):
    (tiny_beir / "corpus.jsonl").write_text("", encoding="utf-8")
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            str(tiny_model),
            "--backend",
            "auto",
            "--device",
            "cpu",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 1
    assert "the corpus is empty" in result.stderr.strip().splitlines()[-1]
    assert not list((tmp_path / "out").glob("**/*.json"))


# --- the bounds read the right figure, and the probe's key holds the cores it ran on ------------------------------


class Cosines:
    """Encodes text i to a vector at exactly `cosines[i]` to the reference's (same clock as `Timed`)."""

    def __init__(self, clock: Clock, per_text: float, cosines: list[float] | None, reference: np.ndarray):
        self.clock, self.per_text = clock, per_text
        if cosines is None:
            self.vectors = reference
        else:
            unit = reference / np.linalg.norm(reference, axis=1, keepdims=True)
            other = np.roll(unit, 1, axis=1)
            other -= (other * unit).sum(axis=1, keepdims=True) * unit  # orthogonal to the reference
            other /= np.linalg.norm(other, axis=1, keepdims=True)
            c = np.asarray(cosines)[:, None]
            self.vectors = c * unit + np.sqrt(1 - c**2) * other

    def encode_docs(self, texts):
        self.clock.now += self.per_text * len(texts)
        return self.vectors[: len(texts)]


_CLOSE = st.floats(0.995, 1.0)  # a text a runtime encodes as torch does
_BROKEN = st.floats(0.90, 0.9795)  # one it breaks: under the min bound, over the mean's once averaged with the rest


@st.composite
def _probes(draw):
    n = draw(st.integers(8, 40))
    costs = {"torch": 0.04}
    cosines: dict[str, list[float] | None] = {"torch": None}
    for name in ("onnx", "openvino", "onnx-int8"):
        values = draw(st.lists(_CLOSE, min_size=n, max_size=n))
        if draw(st.booleans()):
            values[draw(st.integers(0, n - 1))] = draw(_BROKEN)
        cosines[name], costs[name] = values, draw(st.sampled_from([0.01, 0.02, 0.03, 0.05]))
    return n, costs, cosines


@settings(derandomize=True, deadline=None, max_examples=60)
@given(_probes())
def test_a_candidate_is_eligible_by_its_mean_and_its_smallest_cosine_each_against_its_own_bound(probe):
    n, costs, cosines = probe
    clock, reference = Clock(), np.random.default_rng(n).normal(size=(n, 8))
    encoders = {name: Cosines(clock, costs[name], cosines[name], reference) for name in costs}
    chosen = [Candidate(name) for name in costs]
    choice = pick_backend({"n": n}, ["x"] * n, lambda c: encoders[c.name], None, chosen, timer=clock)
    eligible = {"torch": True}
    for name in ("onnx", "openvino", "onnx-int8"):
        measured = _cosines(reference, encoders[name].encode_docs(["x"] * n))
        eligible[name] = measured.mean() >= 0.994 and measured.min() >= 0.98
    fastest = min((name for name in costs if eligible[name]), key=lambda name: (costs[name], name != "torch"))
    rows = {row["backend"]: row for row in choice["candidates"]}
    assert {name: row["eligible"] for name, row in rows.items()} == eligible
    if fastest != "torch" and costs[fastest] in [costs[m] for m in costs if m != fastest and eligible[m]]:
        return  # two eligible at one speed: either is the fastest
    assert choice["picked"] == fastest


def test_a_runtime_breaking_one_text_is_refused_though_its_mean_passes():
    clock, reference = Clock(), np.random.default_rng(0).normal(size=(40, 8))
    encoders = {
        "torch": Cosines(clock, 0.04, None, reference),
        "onnx": Cosines(clock, 0.01, [1.0] * 39 + [0.95], reference),  # mean 0.99875, min 0.95
    }
    choice = pick_backend(
        {}, ["x"] * 40, lambda c: encoders[c.name], None, [Candidate("torch"), Candidate("onnx")], timer=clock
    )
    row = next(row for row in choice["candidates"] if row["backend"] == "onnx")
    assert row["cosine_mean"] >= 0.994 and row["cosine_min"] < 0.98
    assert choice["picked"] == "torch" and not row["eligible"] and row["why"].startswith("min cosine 0.9500 < 0.98")


@pytest.mark.parametrize(
    "onnx_cost", [1 / 32, 1 / 32 * (1 - 1e-6), 1 / 32 * (1 + 1e-6)], ids=["tie", "faster", "slower"]
)
def test_a_candidate_exactly_as_fast_as_torch_fp32_leaves_torch_fp32_picked(onnx_cost):
    """Only a candidate faster than torch fp32 is picked: at exactly its speed torch fp32 runs (it needs no other
    runtime). Costs of 1/32 s a text over 32 texts keep the fake clock's sums exact, so the tie is exact."""
    clock = Clock()
    costs = {"torch": 1 / 32, "onnx": onnx_cost}
    encoders = _encoders(clock, costs, {})  # no tilt: onnx's vectors are torch's, well within the bound
    chosen = [Candidate("torch"), Candidate("onnx")]
    choice = pick_backend({}, ["x"] * 32, lambda c: encoders[c.name], None, chosen, timer=clock)
    rows = {row["backend"]: row for row in choice["candidates"]}
    assert rows["onnx"]["eligible"] and rows["onnx"]["docs_per_s"] == pytest.approx(1 / onnx_cost, rel=1e-12)
    if onnx_cost == costs["torch"]:
        assert rows["onnx"]["docs_per_s"] == rows["torch"]["docs_per_s"]  # the test's premise: an exact tie
    fastest = min(costs, key=lambda name: (costs[name], name != "torch"))  # the fastest; torch fp32 on a tie
    assert choice["picked"] == fastest
    if fastest == "torch":
        assert choice["reason"] == "torch fp32 was the fastest"


@pytest.mark.parametrize("field", ["cpu", "machine", "os", "cores_used", "cpu_flags"])
def test_the_probe_key_changes_with_each_fact_of_the_host(field, monkeypatch):
    host = {"cpu": "c", "machine": "x86_64", "os": "Linux 6", "cores_used": 4, "cpu_flags": ["avx2"], "gpus": []}
    monkeypatch.setattr(auto, "host_info", lambda threads=None: dict(host))
    before = auto.probe_key({"m": 1}, CANDIDATES)
    host[field] = {
        "cpu": "d",
        "machine": "aarch64",
        "os": "Linux 7",
        "cores_used": 2,
        "cpu_flags": ["avx2", "avx512f"],
    }[field]
    assert auto.probe_key({"m": 1}, CANDIDATES) != before


def test_a_probe_on_other_cores_is_not_recalled_and_one_on_the_same_is(tmp_path):
    # host_info's cores_used: the threads given, else the cores usable; 1, 2 and 3 threads are three probes.
    clock = Clock()
    encoders = _encoders(clock, {"torch": 0.04, "onnx": 0.01}, {})
    chosen = [Candidate("torch"), Candidate("onnx")]
    fingerprint, load = encoders["torch"].fingerprint(), lambda c: encoders[c.name]
    keys = set()
    for threads in (1, 2, 3):
        first = pick_backend(fingerprint, ["x"] * 16, load, tmp_path, chosen, timer=clock, threads=threads)
        again = pick_backend(fingerprint, ["x"] * 16, load, tmp_path, chosen, timer=clock, threads=threads)
        assert not first["probe"]["cached"] and again["probe"]["cached"], threads
        keys.add(first["probe"]["key"])
    assert len(keys) == 3 and len(list((tmp_path / "auto-backend").glob("*.json"))) == 3


@pytest.mark.parametrize(
    ("mean", "smallest", "eligible"),
    [
        (0.994, 0.98, True),  # both exactly at their bound: within it (the bound is "at least")
        (math.nextafter(0.994, 0), 0.98, False),
        (0.994, math.nextafter(0.98, 0), False),
    ],
    ids=["at-both-bounds", "mean-one-ulp-under", "min-one-ulp-under"],
)
def test_a_cosine_exactly_at_its_bound_is_within_it(mean, smallest, eligible):
    rows = [
        {"backend": "torch", "cosine_mean": 1.0, "cosine_min": 1.0, "docs_per_s": 10.0, "vs_torch": 1.0},
        {"backend": "onnx", "cosine_mean": mean, "cosine_min": smallest, "docs_per_s": 40.0, "vs_torch": 4.0},
    ]
    choice = auto.choose(rows, [Candidate("torch"), Candidate("onnx")])
    judged = {row["backend"]: row["eligible"] for row in choice["candidates"]}
    assert judged == {"torch": True, "onnx": eligible}
    assert choice["picked"] == ("onnx" if eligible else "torch")
