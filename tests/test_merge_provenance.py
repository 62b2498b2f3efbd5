"""Every vote kept, ties decided by a named rule, and the qrels' provenance: a merge's qrels rebuilt from its
annotations alone by a brute-force loop here, κ and α of the provenance against scikit-learn and the
`krippendorff` package, and every refusal whole (exit 1, nothing written)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path

import krippendorff
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from harness.cli import cli


def _folder(tmp_path: Path, qrels: str | None = None) -> Path:
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i}"}) + "\n" for i in range(1, 7))
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(1, 4))
    )
    if qrels is not None:
        (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return root


def _csv(tmp_path: Path, name: str, rows: list[tuple[str, str, int, str]]) -> Path:
    path = tmp_path / name
    path.write_text("query_id,doc_id,grade,annotator\n" + "".join(f"{q},{d},{g},{a}\n" for q, d, g, a in rows))
    return path


def _merge(*args):
    return CliRunner().invoke(cli, ["judgments", "merge", *map(str, args)])


def _qrels(root: Path) -> dict[tuple[str, str], int]:
    lines = (root / "qrels" / "test.tsv").read_text().splitlines()
    return {(q, d): int(g) for q, d, g in (line.split("\t") for line in lines[1:])}


def _records(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "qrels" / "test.annotations.jsonl").read_text().splitlines()]


def _rebuilt(root: Path, policy: str, ties: str) -> dict[tuple[str, str], int]:
    """The qrels from the annotations alone, resolved here by a loop (not the function under test)."""
    votes: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in _records(root):
        if not r.get("superseded"):
            votes[r["query_id"], r["doc_id"]].append(r["grade"])
    pick = min if ties == "low" else max
    out = {}
    for pair, grades in votes.items():
        if policy == "majority":
            top = max(Counter(grades).values())
            out[pair] = pick(g for g, c in Counter(grades).items() if c == top)
        else:  # mean: the nearest integer; exactly halfway goes by the tie rule
            mean = Fraction(sum(grades), len(grades))
            nearest = sorted(range(min(grades), max(grades) + 1), key=lambda g: abs(g - mean))
            best = [g for g in nearest if abs(g - mean) == abs(nearest[0] - mean)]
            out[pair] = pick(best)
    return out


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_hand_edited_grade_a_merge_overrules_is_kept_and_the_qrels_rebuild_from_the_annotations(tmp_path):
    root = _folder(tmp_path)
    first = _csv(tmp_path, "a.csv", [("q1", "d1", 2, "a"), ("q1", "d2", 1, "a"), ("q2", "d3", 0, "a")])
    assert _merge(root, first).exit_code == 0
    qrels = root / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("q1\td1\t2", "q1\td1\t0"))  # edited by hand: 2 -> 0
    second = _csv(tmp_path, "b.csv", [("q1", "d1", 2, "b"), ("q2", "d3", 1, "b")])
    result = _merge(root, second)
    assert result.exit_code == 0, result.output
    assert "changed (q1, d1): 0 -> 2" in result.output  # a=2, b=2 overrule the hand edit
    hand = [r for r in _records(root) if r["annotator"] == "qrels:test"]
    assert [(r["query_id"], r["doc_id"], r["grade"], r["source"]) for r in hand] == [("q1", "d1", 0, str(qrels))]
    assert _qrels(root) == _rebuilt(root, "majority", "low")
    before = _snapshot(root)
    again = _merge(root, first, second)  # re-merging: nothing new, nothing written differently
    assert again.exit_code == 0 and "0 new, 0 changed" in again.output
    after = _snapshot(root)
    assert {k: v for k, v in after.items() if "provenance" not in k} == {
        k: v for k, v in before.items() if "provenance" not in k
    }


def test_a_second_hand_edit_replaces_the_qrels_vote_and_keeps_the_first_as_superseded(tmp_path):
    root = _folder(tmp_path, "q1\td1\t0\n")
    grades = _csv(tmp_path, "a.csv", [("q1", "d1", 3, "a"), ("q1", "d1", 3, "b")])
    assert _merge(root, grades).exit_code == 0  # qrels:test 0 recorded, outvoted by a and b
    qrels = root / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("q1\td1\t3", "q1\td1\t1"))
    assert _merge(root, grades).exit_code == 0
    kept = sorted((r["annotator"], r["grade"], bool(r.get("superseded"))) for r in _records(root))
    assert kept == [("a", 3, False), ("b", 3, False), ("qrels:test", 0, True), ("qrels:test", 1, False)]
    assert _qrels(root) == _rebuilt(root, "majority", "low") == {("q1", "d1"): 3}


def test_a_mean_no_annotator_gave_is_not_taken_for_a_hand_edit_on_re_merge(tmp_path):
    root = _folder(tmp_path)
    grades = _csv(
        tmp_path, "g.csv", [("q1", "d1", 0, "a"), ("q1", "d1", 3, "b"), ("q1", "d2", 1, "a"), ("q1", "d2", 3, "b")]
    )
    assert _merge(root, grades, "--resolve", "mean").exit_code == 0
    assert _qrels(root) == {("q1", "d1"): 1, ("q1", "d2"): 2} == _rebuilt(root, "mean", "low")
    again = _merge(root, grades, "--resolve", "mean")
    assert again.exit_code == 0 and "0 new, 0 changed" in again.output
    assert not [r for r in _records(root) if r["annotator"].startswith("qrels:")]


@pytest.mark.parametrize("policy", ["majority", "mean"])
@pytest.mark.parametrize("ties", ["low", "high"])
def test_two_annotators_disagreeing_are_settled_by_the_named_tie_rule(tmp_path, policy, ties):
    root = _folder(tmp_path)
    rows = [
        ("q1", "d1", 1, "a"),
        ("q1", "d1", 2, "b"),
        ("q1", "d2", 0, "a"),
        ("q1", "d2", 1, "b"),
        ("q2", "d3", 3, "a"),
        ("q2", "d3", 3, "b"),
    ]
    result = _merge(root, _csv(tmp_path, "g.csv", rows), "--resolve", policy, "--ties", ties)
    assert result.exit_code == 0, result.output
    assert f"(resolved by {policy}, ties {ties}: 2 settled by the tie rule)" in result.output
    pick = min if ties == "low" else max
    assert _qrels(root) == {("q1", "d1"): pick(1, 2), ("q1", "d2"): pick(0, 1), ("q2", "d3"): 3}
    assert _qrels(root) == _rebuilt(root, policy, ties)


def test_the_default_tie_rule_is_named_in_the_output(tmp_path):
    root = _folder(tmp_path)
    result = _merge(root, _csv(tmp_path, "g.csv", [("q1", "d1", 1, "a"), ("q1", "d1", 2, "b")]))
    assert "(resolved by majority, ties low: 1 settled by the tie rule)" in result.output
    assert _qrels(root) == {("q1", "d1"): 1}


def test_the_provenance_records_annotators_policy_ties_and_agreement(tmp_path):
    root = _folder(tmp_path)
    a = [3, 2, 0, 1, 2, 3]
    b = [3, 1, 0, 1, 3, 2]
    pairs = [(f"q{1 + i // 3}", f"d{1 + i}") for i in range(6)]
    rows = [(q, d, g, "alice") for (q, d), g in zip(pairs, a)] + [(q, d, g, "bob") for (q, d), g in zip(pairs, b)]
    assert _merge(root, _csv(tmp_path, "g.csv", rows), "--ties", "high").exit_code == 0
    record = json.loads((root / "qrels" / "test.provenance.json").read_text())
    assert record["annotators"] == {"alice": 6, "bob": 6}
    assert (record["policy"], record["ties"], record["scale"], record["pairs"]) == ("majority", "high", [0, 3], 6)
    assert record["merged_at"]
    kappa = cohen_kappa_score(a, b, labels=[0, 1, 2, 3], weights="linear")
    assert record["kappa"] == [
        {"first": "alice", "second": "bob", "both_graded": 6, "kappa": pytest.approx(kappa, abs=1e-6)}
    ]
    alpha = krippendorff.alpha(reliability_data=[a, b], level_of_measurement="ordinal", value_domain=[0, 1, 2, 3])
    assert record["alpha"] == pytest.approx(alpha, abs=1e-6)


# --- bad input ---------------------------------------------------------------------------------------------------


def _refused(root: Path, *args) -> str:
    before = _snapshot(root)
    result = _merge(root, *args)
    assert result.exit_code == 1, result.output
    assert _snapshot(root) == before
    return result.output


def test_ties_refuse_lists_the_pairs_the_policy_cannot_decide(tmp_path):
    root = _folder(tmp_path)
    rows = [
        ("q1", "d1", 1, "a"),
        ("q1", "d1", 2, "b"),
        ("q1", "d2", 3, "a"),
        ("q1", "d2", 3, "b"),
        ("q1", "d3", 0, "a"),
        ("q1", "d3", 1, "b"),
        ("q1", "d3", 1, "c"),
    ]
    output = _refused(root, _csv(tmp_path, "g.csv", rows), "--ties", "refuse")
    lines = output.splitlines()
    assert lines[0] == (
        "Error: 1 pairs the majority policy cannot decide, and --ties refuse (pass --ties low or "
        "--ties high, or settle them; nothing written):"
    )
    assert lines[1].strip() == "(q1, d1): a=1, b=2"


def test_merging_into_a_split_whose_provenance_records_another_scale_is_refused(tmp_path):
    root = _folder(tmp_path, "q1\td1\t1\n")
    (root / "qrels" / "test.provenance.json").write_text(json.dumps({"scale": [0, 4], "policy": "majority"}))
    output = _refused(root, _csv(tmp_path, "g.csv", [("q2", "d3", 1, "b")]))
    assert "split 'test' was merged on the scale 0-4, not 0-3" in output.splitlines()[0]


def test_a_judging_page_export_whose_annotator_differs_from_its_session_is_refused(tmp_path):
    root = _folder(tmp_path)
    export = _csv(tmp_path, "judgments-0123456789abcdef-bob.csv", [("q1", "d1", 1, "bob"), ("q1", "d2", 2, "alice")])
    output = _refused(root, export)
    assert output.splitlines()[0] == (
        f"Error: {export}:3: annotator 'alice', but the judging page exported this file from the session of 'bob' "
        "(its name) (merge the file the page exported for that annotator as it was saved; an export holds only "
        "the grades of the name typed in the page)"
    )


def test_results_scored_on_merged_qrels_carry_the_provenance_and_report_shows_it(tmp_path, monkeypatch):
    root = _folder(tmp_path)
    rows = [("q1", "d1", 2, "alice"), ("q1", "d1", 1, "bob"), ("q2", "d2", 3, "alice"), ("q2", "d2", 3, "bob")]
    assert _merge(root, _csv(tmp_path, "g.csv", rows), "--ties", "high").exit_code == 0
    recorded = json.loads((root / "qrels" / "test.provenance.json").read_text())
    monkeypatch.chdir(tmp_path)
    scored = CliRunner().invoke(cli, ["-q", "evaluate", str(root), "--model", "bm25", "--k", "3"])
    assert scored.exit_code == 0, scored.output
    (result_file,) = (tmp_path / "results").rglob("test.json")
    assert json.loads(result_file.read_text())["config"]["qrels_provenance"] == recorded
    report = CliRunner().invoke(cli, ["report", "results", "--metric", "nDCG@3"])
    assert report.exit_code == 0, report.output
    note = next(line for line in report.output.splitlines() if "qrels merged" in line)
    assert note == (
        f"set [test]: qrels merged {recorded['merged_at']} from 2 annotators (alice 2, bob 2) by majority, "
        f"ties high, scale 0-3; κ alice/bob {recorded['kappa'][0]['kappa']:.3f}; α {recorded['alpha']:.3f}"
    )


def test_a_fusion_of_results_on_merged_qrels_carries_their_provenance(tmp_path, monkeypatch):
    root = _folder(tmp_path)
    rows = [("q1", "d1", 2, "alice"), ("q1", "d1", 1, "bob"), ("q2", "d2", 3, "alice"), ("q2", "d3", 1, "bob")]
    assert _merge(root, _csv(tmp_path, "g.csv", rows)).exit_code == 0
    recorded = json.loads((root / "qrels" / "test.provenance.json").read_text())
    monkeypatch.chdir(tmp_path)
    for model in ("bm25", "hash:16"):
        assert CliRunner().invoke(cli, ["-q", "evaluate", str(root), "--model", model]).exit_code == 0
    results = sorted(str(p) for p in (tmp_path / "results").rglob("test.json"))
    fused = CliRunner().invoke(cli, ["fuse", *results, "--json"])
    assert fused.exit_code == 0, fused.output
    assert json.loads(fused.output)["config"]["qrels_provenance"] == recorded
