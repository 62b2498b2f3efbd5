"""``--backend auto`` held to the pace its pick keeps on the corpus (`harness.runtimes.auto.observe_pick`): a pick
that encoded the corpus slower than torch fp32 ran in the probe turns this host's cached choice into torch fp32,
with the observation; a pick that kept its pace, torch itself, or a short encode changes nothing.

The probe runs on fake encoders under a fake clock (speed is exactly what the test says); the corpus paces are
given as counts and seconds, never measured."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.runtimes.auto import CHECK_MIN_DOCS, PROBE_TEXTS, Candidate, observe_pick, pick_backend


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Timed:
    """Encodes to fixed vectors and costs `per_text` fake seconds per text."""

    def __init__(self, clock: _Clock, per_text: float):
        self.clock, self.per_text = clock, per_text
        self.base = np.random.default_rng(0).normal(size=(200, 8))

    def encode_docs(self, texts):
        self.clock.now += self.per_text * len(texts)
        return self.base[: len(texts)].copy()

    def fingerprint(self):
        return {"name": "fake"}


TORCH_PER_TEXT = 0.05  # torch fp32: 20 docs/s in the probe
CANDIDATES = [Candidate("torch"), Candidate("onnx-int8")]


def _probe(root):
    clock = _Clock()
    encoders = {"torch": _Timed(clock, TORCH_PER_TEXT), "onnx-int8": _Timed(clock, 0.025)}  # int8 twice as fast
    sample = [f"text {i}" for i in range(64)]
    return lambda: pick_backend({"name": "fake"}, sample, lambda c: encoders[c.name], root, CANDIDATES, timer=clock)


def test_a_pick_slower_than_torch_on_the_corpus_makes_torch_this_hosts_choice(tmp_path):
    probe = _probe(tmp_path)
    choice = probe()
    assert choice["picked"] == "onnx-int8" and not choice["probe"]["cached"]  # the premise
    docs, seconds = 2000, 2000 / 19.0  # 19 docs/s on the corpus: below torch's 20 in the probe
    note = observe_pick(choice, docs, seconds, tmp_path)
    assert note is not None and "onnx-int8" in note and "19.0 docs/s" in note and "20.0 docs/s" in note
    again = probe()
    assert again["probe"]["cached"] and (again["backend"], again["precision"], again["picked"]) == (
        "torch",
        "fp32",
        "torch",
    )
    assert again["demoted"]["onnx-int8"]["docs"] == docs
    assert again["demoted"]["onnx-int8"]["docs_per_s"] == pytest.approx(19.0)
    assert [row["backend"] for row in again["candidates"]] == ["torch", "onnx-int8"]  # the probe's rows kept
    assert observe_pick(again, docs, seconds, tmp_path) is None  # torch is no pick to hold to a pace


@pytest.mark.parametrize(
    ("docs", "pace"),
    [
        (2000, None),  # exactly torch's probe pace (as the probe recorded it): kept
        (2000, 35.0),  # slower than in the probe (40), faster than torch: kept
        (CHECK_MIN_DOCS - 1, 5.0),  # too short an encode to say more than the probe did
        (None, 5.0),  # every vector cached: nothing encoded
    ],
)
def test_a_pick_that_kept_its_pace_or_a_short_encode_changes_nothing(tmp_path, docs, pace):
    probe = _probe(tmp_path)
    choice = probe()
    path = next((tmp_path / "auto-backend").glob("*.json"))
    before = path.read_bytes()
    pace = pace or next(row["docs_per_s"] for row in choice["candidates"] if row["backend"] == "torch")
    assert observe_pick(choice, docs, (docs or 100) / pace, tmp_path) is None
    assert path.read_bytes() == before and probe()["picked"] == "onnx-int8"


def test_the_shortest_checked_encode_is_checked(tmp_path):
    choice = _probe(tmp_path)()
    assert CHECK_MIN_DOCS == 4 * PROBE_TEXTS
    assert observe_pick(choice, CHECK_MIN_DOCS, CHECK_MIN_DOCS / 10.0, tmp_path) is not None


def test_without_a_cache_the_note_says_nothing_is_kept(tmp_path):
    choice = _probe(tmp_path)()
    path = next((tmp_path / "auto-backend").glob("*.json"))
    before = path.read_bytes()
    note = observe_pick(choice, 2000, 200.0, None)
    assert note is not None and "nothing is kept" in note and path.read_bytes() == before


def test_a_moot_choice_is_not_checked(tmp_path):
    from harness.runtimes.auto import moot

    assert observe_pick(moot("the corpus has no documents to probe"), 2000, 1000.0, tmp_path) is None
    assert not (tmp_path / "auto-backend").exists()


def test_the_demoted_choice_file_is_valid_json_with_the_probe_key(tmp_path):
    choice = _probe(tmp_path)()
    observe_pick(choice, 2000, 1000.0, tmp_path)
    path = tmp_path / "auto-backend" / f"{choice['probe']['key']}.json"
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["picked"] == "torch" and "slower than torch fp32 in the probe" in stored["reason"]
    assert not list((tmp_path / "auto-backend").glob("*.tmp"))


def _fast_probe(root):
    """A probe in which torch fp32 ran at 10,000 docs/s and onnx-int8 at 20,000."""
    clock = _Clock()
    encoders = {"torch": _Timed(clock, 0.0001), "onnx-int8": _Timed(clock, 0.00005)}
    sample = [f"text {i}" for i in range(64)]
    return pick_backend({"name": "fake"}, sample, lambda c: encoders[c.name], root, CANDIDATES, timer=clock)


def test_an_encode_under_a_second_is_still_held_to_its_pace_and_no_time_at_all_is_not(tmp_path):
    choice = _fast_probe(tmp_path)
    assert observe_pick(choice, 2000, 0.5, tmp_path) is not None  # 4,000 docs/s: below torch's 10,000
    choice = _fast_probe(tmp_path / "other")
    assert observe_pick(choice, 2000, 0.0, tmp_path / "other") is None  # nothing timed: no pace to judge


def test_the_note_and_the_observation_are_exactly_what_the_run_saw(tmp_path):
    choice = _probe(tmp_path)()
    seconds = 2000 / 19.0
    expected = (
        "--backend auto's pick onnx-int8 encoded 2,000 corpus texts at 19.0 docs/s, slower than torch fp32 in the "
        "probe (20.0 docs/s)"
    )
    path = tmp_path / "auto-backend" / f"{choice['probe']['key']}.json"
    assert observe_pick(choice, 2000, seconds, None) == expected + (
        "; the probe's choice is not cached here, so nothing is kept of this"
    )
    assert observe_pick(choice, 2000, seconds, tmp_path) == (
        f"{expected}; this host's cached choice is now torch fp32 ({path}; remove it to probe again)"
    )
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["reason"] == f"{expected}: torch fp32 from then on"
    assert stored["demoted"] == {
        "onnx-int8": {"docs": 2000, "seconds": round(seconds, 4), "docs_per_s": 2000 / seconds}
    }
    assert round(seconds, 4) != round(seconds, 5)  # the rounding is the record's, not the test's
