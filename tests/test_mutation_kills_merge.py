"""`judgments merge`'s tie and rounding rules (mutation testing: docs/mutation-report.md).

The references are written here: every multiset of up to four grades on -1..3 is resolved by a brute-force
loop (majority: the most votes, a tie to the lowest grade by default; mean: the exact fraction rounded to the
nearest grade, an exact half settled by the tie rule, low by default; max), and merges are run with ties under
every policy and tie rule.
"""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from harness.errors import DatasetError
from harness.judging.merge import merge_judgments, parse_scale, resolve


def majority_by_hand(grades):
    best, best_votes = None, -1
    for grade in sorted(set(grades)):  # ascending: a later grade wins only with strictly more votes
        votes = sum(1 for g in grades if g == grade)
        if votes > best_votes:
            best, best_votes = grade, votes
    return best


def mean_by_hand(grades, ties="low"):
    """The exact mean rounded to the nearest grade; an exact half goes to the tie rule's side."""
    mean = Fraction(sum(grades), len(grades))
    below = math.floor(mean)
    if mean - below == Fraction(1, 2):
        return below if ties == "low" else below + 1
    return below + (mean - below > Fraction(1, 2))


def majority_high_by_hand(grades):
    counts = {g: grades.count(g) for g in set(grades)}
    return max(g for g, c in counts.items() if c == max(counts.values()))


def all_grade_lists():
    for size in range(1, 5):
        yield from itertools.product(range(-1, 4), repeat=size)


def test_majority_takes_the_lowest_of_the_tied_grades():
    for grades in all_grade_lists():
        assert resolve(list(grades), "majority") == majority_by_hand(grades), grades


def test_mean_rounds_to_the_nearest_and_a_half_by_the_tie_rule():
    for grades in all_grade_lists():
        assert resolve(list(grades), "mean") == mean_by_hand(grades), grades
        assert resolve(list(grades), "mean", "low") == mean_by_hand(grades, "low"), grades
        assert resolve(list(grades), "mean", "high") == mean_by_hand(grades, "high"), grades


def test_majority_ties_go_to_the_tie_rule():
    for grades in all_grade_lists():
        assert resolve(list(grades), "majority", "high") == majority_high_by_hand(list(grades)), grades
        undecided = resolve(list(grades), "majority", "refuse") is None
        assert undecided == (majority_by_hand(grades) != majority_high_by_hand(list(grades))), grades


def test_max_is_the_highest():
    for grades in all_grade_lists():
        assert resolve(list(grades), "max") == max(grades), grades


@pytest.mark.parametrize(
    "grades, majority, mean",
    [
        ([1, 2], 1, 1),
        ([2, 1], 1, 1),
        ([0, 3], 0, 1),
        ([3, 0, 0, 3], 0, 1),
        ([1, 2, 2, 1], 1, 1),
        ([-1, 0], -1, -1),
        ([0, 1, 1, 0], 0, 0),
        ([2, 2, 3], 2, 2),
        ([0, 0, 1], 0, 0),
        ([1, 2, 2], 2, 2),
    ],
)
def test_named_ties_and_halves(grades, majority, mean):
    assert resolve(grades, "majority") == majority
    assert resolve(grades, "mean") == mean


def _folder(tmp_path: Path, qrels: str | None = None) -> Path:
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i}"}) + "\n" for i in range(1, 5))
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(1, 3))
    )
    if qrels is not None:
        (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return root


def _qrels_by_hand(path: Path) -> dict[tuple[str, str], int]:
    lines = path.read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    return {(q, d): int(g) for q, d, g in (line.split("\t") for line in lines[1:])}


# (q1, d1): a 1-2 tie; (q1, d2): a 0-3 tie (mean 1.5); (q2, d3): 2-2-3-3 (mean 2.5); (q2, d4): agreed 1.
TIES = (
    "query_id,doc_id,grade,annotator\n"
    "q1,d1,1,a\nq1,d1,2,b\n"
    "q1,d2,3,a\nq1,d2,0,b\n"
    "q2,d3,3,a\nq2,d3,2,b\nq2,d3,3,c\nq2,d3,2,d\n"
    "q2,d4,1,a\nq2,d4,1,b\n"
)
VOTES = {("q1", "d1"): [1, 2], ("q1", "d2"): [3, 0], ("q2", "d3"): [3, 2, 3, 2], ("q2", "d4"): [1, 1]}
BY_HAND = {"majority": majority_by_hand, "mean": mean_by_hand, "max": max}


@pytest.mark.parametrize("policy", ["majority", "mean", "max"])
def test_a_merge_with_ties_resolves_each_pair_by_its_policy(tmp_path, policy):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    report = merge_judgments(root, [tmp_path / "g.csv"], policy=policy)
    expected = {pair: BY_HAND[policy](grades) for pair, grades in VOTES.items()}
    assert expected == {
        ("q1", "d1"): {"majority": 1, "mean": 1, "max": 2}[policy],
        ("q1", "d2"): {"majority": 0, "mean": 1, "max": 3}[policy],
        ("q2", "d3"): {"majority": 2, "mean": 2, "max": 3}[policy],
        ("q2", "d4"): 1,
    }
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == expected
    assert report.n_read == 10 and report.n_pairs == 4 and report.added == 4 and report.changed == []
    assert [(q, d) for q, d, _ in report.conflicts] == [("q1", "d1"), ("q1", "d2"), ("q2", "d3")]


def test_strict_refuses_a_tie_and_writes_nothing(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    with pytest.raises(DatasetError, match="3 pairs with disagreeing grades"):
        merge_judgments(root, [tmp_path / "g.csv"], policy="strict")
    assert sorted(p.name for p in (root / "qrels").iterdir()) == []


def test_strict_takes_agreeing_grades(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text("query_id,doc_id,grade,annotator\nq1,d1,2,a\nq1,d1,2,b\nq2,d4,0,a\n")
    report = merge_judgments(root, [tmp_path / "g.csv"], policy="strict")
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {("q1", "d1"): 2, ("q2", "d4"): 0}
    assert report.conflicts == []


@pytest.mark.parametrize("policy, expected", [("majority", 1), ("mean", 1), ("max", 2)])
def test_an_existing_grade_tied_by_a_new_one_is_a_vote(tmp_path, policy, expected):
    # the qrels' own grade 1 votes against the new annotator's 2: a tie, resolved (and listed as changed) by policy
    root = _folder(tmp_path, "q1\td1\t1\n")
    (tmp_path / "g.csv").write_text("query_id,doc_id,grade,annotator\nq1,d1,2,a\n")
    report = merge_judgments(root, [tmp_path / "g.csv"], policy=policy)
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {("q1", "d1"): expected}
    assert report.changed == ([] if expected == 1 else [("q1", "d1", 1, expected)])
    assert report.added == 0
    assert report.conflicts == [("q1", "d1", {"qrels:test": 1, "a": 2})]


def test_a_dry_merge_writes_nothing(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    report = merge_judgments(root, [tmp_path / "g.csv"], write=False)
    assert not report.written and list((root / "qrels").iterdir()) == []


@pytest.mark.parametrize("text, scale", [("0-3", (0, 3)), (" -1 - 2 ", (-1, 2)), ("0-1", (0, 1))])
def test_a_scale_is_read(text, scale):
    assert parse_scale(text) == scale


@pytest.mark.parametrize("text", ["3-3", "3-0", "0", "a-b", "0-3-4"])
def test_a_bad_scale_is_refused(text):
    with pytest.raises(ValueError):
        parse_scale(text)


def _refusal_text(root, files, **options):
    with pytest.raises(DatasetError) as caught:
        merge_judgments(root, files, **options)
    assert list((root / "qrels").iterdir()) == [] or options.get("expect_files")
    return str(caught.value)


def test_one_annotator_grading_a_pair_two_ways_is_refused_naming_both_places(tmp_path):
    root = _folder(tmp_path)
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    one.write_text("query_id,doc_id,grade,annotator\nq1,d1,1,a\nq1,d2,2,a\n")
    two.write_text("query_id,doc_id,grade,annotator\nq1,d1,3,a\nq1,d2,2,a\nq1,d1,1,b\n")
    assert _refusal_text(root, [one, two]) == (
        "1 pairs graded twice differently by the same annotator (keep one grade per annotator and pair; nothing "
        f"written):\n  a graded (q1, d1) 1 at {one}:2 and 3 at {two}:2"
    )


def test_grades_off_the_scale_are_refused_each_named(tmp_path):
    root = _folder(tmp_path)
    grades = tmp_path / "g.csv"
    grades.write_text("query_id,doc_id,grade,annotator\nq1,d1,4,a\nq1,d2,3,a\nq2,d3,-1,a\n")
    assert _refusal_text(root, [grades]) == (
        f"2 grades outside the scale 0-3 (fix them or pass `scale`; nothing written):\n"
        f"  {grades}:2: grade 4 for (q1, d1)\n  {grades}:4: grade -1 for (q2, d3)"
    )
    assert merge_judgments(root, [grades], scale=(-1, 4)).n_pairs == 3


def test_the_scale_bounds_are_inclusive(tmp_path):
    root = _folder(tmp_path)
    grades = tmp_path / "g.csv"
    grades.write_text("query_id,doc_id,grade,annotator\nq1,d1,0,a\nq1,d2,3,a\n")
    assert _qrels_after(root, grades) == {("q1", "d1"): 0, ("q1", "d2"): 3}


def _qrels_after(root, grades, **options):
    merge_judgments(root, [grades], **options)
    return _qrels_by_hand(root / "qrels" / "test.tsv")


def test_a_bad_scale_says_what_it_wants():
    with pytest.raises(ValueError) as caught:
        parse_scale("3-0")
    assert str(caught.value) == "grade scale '3-0' is not LOW-HIGH with LOW < HIGH (e.g. 0-3)"


def test_a_split_on_another_scale_is_refused_naming_it(tmp_path):
    root = _folder(tmp_path, "q1\td1\t1\n")
    grades = tmp_path / "g.csv"
    grades.write_text("query_id,doc_id,grade,annotator\nq1,d2,4,a\n")
    merge_judgments(root, [grades], scale=(0, 4))
    other = tmp_path / "o.csv"
    other.write_text("query_id,doc_id,grade,annotator\nq2,d3,1,b\n")
    with pytest.raises(DatasetError) as caught:
        merge_judgments(root, [other])
    assert str(caught.value) == (
        f"{root / 'qrels' / 'test.tsv'}: split 'test' was merged on the scale 0-4, not 0-3 "
        "(pass that `scale`, or merge into a new split; nothing written)"
    )


def test_a_split_holding_grades_off_the_scale_is_refused_naming_them(tmp_path):
    root = _folder(tmp_path, "q1\td1\t5\nq1\td2\t4\nq2\td3\t1\n")
    grades = tmp_path / "g.csv"
    grades.write_text("query_id,doc_id,grade,annotator\nq2,d4,1,b\n")
    with pytest.raises(DatasetError) as caught:
        merge_judgments(root, [grades])
    assert str(caught.value) == (
        f"{root / 'qrels' / 'test.tsv'}: split 'test' holds grades 4, 5, not 0-3 "
        "(pass that `scale`, or merge into a new split; nothing written)"
    )


def test_strict_lists_each_conflict_with_every_vote(tmp_path):
    root = _folder(tmp_path, "q2\td3\t1\n")
    (tmp_path / "g.csv").write_text(TIES)
    with pytest.raises(DatasetError) as caught:
        merge_judgments(root, [tmp_path / "g.csv"], policy="strict")
    assert str(caught.value) == (
        "3 pairs with disagreeing grades under the strict policy (resolve by majority, mean or max, or settle them; "
        "nothing written):\n  (q1, d1): a=1, b=2\n  (q1, d2): a=3, b=0\n  (q2, d3): a=3, b=2, c=3, d=2, qrels:test=1"
    )


def test_an_unknown_policy_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^unknown policy 'vote' \(majority, mean, max, strict\)$"):
        merge_judgments(_folder(tmp_path), [], policy="vote")


def test_a_rerun_of_the_same_merge_changes_nothing(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    merge_judgments(root, [tmp_path / "g.csv"], policy="mean")
    first = (root / "qrels" / "test.tsv").read_text()
    report = merge_judgments(root, [tmp_path / "g.csv"], policy="mean")
    assert (root / "qrels" / "test.tsv").read_text() == first
    assert report.added == 0 and report.changed == [] and report.n_read == 10 and report.n_pairs == 4
    annotations = (root / "qrels" / "test.annotations.jsonl").read_text().splitlines()
    assert len(annotations) == 10  # recorded once, not again


def test_a_later_merge_adds_its_votes_to_the_recorded_ones(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    merge_judgments(root, [tmp_path / "g.csv"], policy="majority")
    (tmp_path / "more.csv").write_text("query_id,doc_id,grade,annotator\nq1,d1,2,c\nq1,d3,0,a\n")
    report = merge_judgments(root, [tmp_path / "more.csv"], policy="majority")
    # (q1, d1): a=1, b=2, c=2 -> 2 (was the 1-2 tie's 1); (q1, d3) is new
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {
        ("q1", "d1"): 2,
        ("q1", "d2"): 0,
        ("q2", "d3"): 2,
        ("q2", "d4"): 1,
        ("q1", "d3"): 0,
    }
    assert report.changed == [("q1", "d1", 1, 2)] and report.added == 1 and report.n_read == 2
