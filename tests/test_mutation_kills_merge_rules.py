"""`judgments merge` reading what an earlier merge left: the recorded rule, the provenance, a hand-edited grade,
an empty qrels file, and folders as sources of votes (mutation testing: docs/mutation-report.md).

Expected grades are worked out here by hand (the exact mean rounded, an exact half by the tie rule; the
majority, a tie to the tie rule's side), never by `resolve`.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from harness.errors import DatasetError
from harness.judging.merge import judgment_votes, merge_judgments

HEADER = "query_id,doc_id,grade,annotator\n"
# (q1, d1): 1 and 2; (q1, d2): 3 and 0 (mean 1.5: no annotator gave 1 or 2); (q2, d3): 3, 2, 3, 2 (mean 2.5);
# (q2, d4): both 1.
TIES = (
    HEADER
    + "q1,d1,1,a\nq1,d1,2,b\nq1,d2,3,a\nq1,d2,0,b\nq2,d3,3,a\nq2,d3,2,b\nq2,d3,3,c\nq2,d3,2,d\nq2,d4,1,a\nq2,d4,1,b\n"
)


def mean_by_hand(grades, ties="low"):
    mean = Fraction(sum(grades), len(grades))
    below = math.floor(mean)
    if mean - below == Fraction(1, 2):
        return below if ties == "low" else below + 1
    return below + (mean - below > Fraction(1, 2))


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i}"}) + "\n" for i in range(1, 5))
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(1, 3))
    )
    return root


def _qrels(root: Path) -> dict[tuple[str, str], int]:
    lines = (root / "qrels" / "test.tsv").read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    return {(q, d): int(g) for q, d, g in (line.split("\t") for line in lines[1:])}


def _edit_qrels(root: Path, pair: tuple[str, str], grade: int) -> None:
    grades = {**_qrels(root), pair: grade}
    body = "".join(f"{q}\t{d}\t{g}\n" for (q, d), g in sorted(grades.items()))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + body)


def _provenance(root: Path) -> Path:
    return root / "qrels" / "test.provenance.json"


def _first_merge(tmp_path: Path, **options) -> Path:
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    merge_judgments(root, [tmp_path / "g.csv"], **options)
    return root


def test_a_split_whose_qrels_file_holds_only_its_header_takes_a_merge(tmp_path):
    root = _folder(tmp_path)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    (tmp_path / "g.csv").write_text(HEADER + "q1,d1,2,a\n")
    report = merge_judgments(root, [tmp_path / "g.csv"])
    assert _qrels(root) == {("q1", "d1"): 2} and report.added == 1


def test_the_provenance_left_beside_a_deleted_qrels_file_still_names_its_scale(tmp_path):
    root = _first_merge(tmp_path)  # merged on 0-3
    (root / "qrels" / "test.tsv").unlink()
    (root / "qrels" / "test.annotations.jsonl").unlink()
    (tmp_path / "h.csv").write_text(HEADER + "q1,d1,5,a\n")
    with pytest.raises(DatasetError, match=r"was merged on the scale 0-3, not 1-5"):
        merge_judgments(root, [tmp_path / "h.csv"], scale=(1, 5))
    assert not (root / "qrels" / "test.tsv").exists()


def test_a_provenance_without_a_scale_is_read_as_naming_none(tmp_path):
    root = _folder(tmp_path)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    _provenance(root).write_text(json.dumps({"policy": "majority"}))
    (tmp_path / "g.csv").write_text(HEADER + "q1,d2,3,a\n")
    merge_judgments(root, [tmp_path / "g.csv"])
    assert _qrels(root) == {("q1", "d1"): 1, ("q1", "d2"): 3}


def test_every_hand_edit_after_the_last_merges_own_resolution_is_a_vote(tmp_path):
    root = _first_merge(tmp_path, policy="mean")
    # the mean merge gave (q1, d2) 1 (of 3 and 0, ties low): a grade no annotator gave, its own resolution.
    assert _qrels(root)[("q1", "d2")] == mean_by_hand([3, 0]) == 1
    _edit_qrels(root, ("q2", "d4"), 3)  # sorted after (q1, d2); a and b gave 1
    merge_judgments(root, [], policy="mean")
    assert _qrels(root)[("q2", "d4")] == mean_by_hand([1, 1, 3]) == 2
    assert _qrels(root)[("q1", "d2")] == 1


def _conflict_votes(report) -> dict[tuple[str, str], dict[str, int]]:
    return {(q, d): votes for q, d, votes in report.conflicts}


def test_the_recorded_policy_and_tie_rule_recognise_the_last_merges_own_resolution(tmp_path):
    # mean with ties high gave (q1, d2) 2: no annotator gave it; a later merge by another policy and tie rule
    # must read it as that merge's resolution (no qrels vote), not as a grade kept by hand.
    root = _first_merge(tmp_path, policy="mean", ties="high")
    assert _qrels(root)[("q1", "d2")] == mean_by_hand([3, 0], "high") == 2
    report = merge_judgments(root, [], policy="majority", ties="low")
    assert _conflict_votes(report)[("q1", "d2")] == {"a": 3, "b": 0}
    assert _qrels(root)[("q1", "d2")] == 0  # the majority of 3 and 0, a tie to the low side
    assert all(not annotator.startswith("qrels:") for votes in _conflict_votes(report).values() for annotator in votes)


def test_a_recorded_tie_rule_that_is_no_tie_rule_falls_back_to_reading_hand_kept_grades_as_votes(tmp_path):
    root = _first_merge(tmp_path, policy="mean", ties="high")
    recorded = json.loads(_provenance(root).read_text())
    _provenance(root).write_text(json.dumps({**recorded, "ties": "sideways"}))
    report = merge_judgments(root, [], policy="majority", ties="low")
    # the recorded rule unreadable: (q1, d2)'s 2 cannot be told from a hand edit, so it votes
    assert _conflict_votes(report)[("q1", "d2")] == {"a": 3, "b": 0, "qrels:test": 2}


def test_an_unknown_tie_rule_is_refused_listing_the_rules(tmp_path):
    with pytest.raises(ValueError, match=r"^unknown tie rule 'sideways' \(low, high, refuse\)$"):
        merge_judgments(_folder(tmp_path), [], ties="sideways")


def test_a_written_merge_says_so_and_a_dry_one_does_not(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    assert merge_judgments(root, [tmp_path / "g.csv"], write=False).written is False
    assert merge_judgments(root, [tmp_path / "g.csv"]).written is True


def test_the_agreement_is_measured_over_exactly_the_scales_grades(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    assert merge_judgments(root, [tmp_path / "g.csv"], scale=(0, 3)).agreement.scale == [0, 1, 2, 3]
    assert merge_judgments(root, [tmp_path / "g.csv"], scale=(0, 3), write=False).agreement.scale == [0, 1, 2, 3]


def test_a_folder_as_a_source_of_votes_gives_its_recorded_annotations(tmp_path):
    root = _first_merge(tmp_path)
    votes = judgment_votes([root])
    by_hand: dict[tuple[str, str], dict[str, int]] = {}
    for line in TIES.splitlines()[1:]:
        query_id, doc_id, grade, annotator = line.split(",")
        by_hand.setdefault((query_id, doc_id), {})[annotator] = int(grade)
    assert {pair: dict(v) for pair, v in votes.items()} == by_hand


def test_a_folder_with_no_annotations_is_refused_naming_the_file_and_the_fix(tmp_path):
    root = _folder(tmp_path)
    with pytest.raises(DatasetError) as caught:
        judgment_votes([root])
    path = root / "qrels" / "test.annotations.jsonl"
    assert str(caught.value) == (
        f"{path}: no annotations (merge judgments into this split first, or pick another with `split`)"
    )


def test_the_mean_of_five_or_six_grades_rounds_to_the_nearest():
    import itertools

    from harness.judging.merge import resolve

    for size in (5, 6):
        for grades in itertools.product(range(3), repeat=size):
            for ties in ("low", "high"):
                assert resolve(list(grades), "mean", ties) == mean_by_hand(grades, ties), (grades, ties)


def test_votes_read_for_agreement_default_to_the_0_3_scale(tmp_path):
    (tmp_path / "g.csv").write_text(HEADER + "q1,d1,4,a\nq1,d1,3,b\n")
    with pytest.raises(DatasetError, match="4"):
        judgment_votes([tmp_path / "g.csv"])
    assert judgment_votes([tmp_path / "g.csv"], scale=(0, 4)) == {("q1", "d1"): {"a": 4, "b": 3}}
