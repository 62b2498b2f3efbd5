"""Every vote kept, ties decided by a named rule, and the qrels' provenance: a merge's qrels rebuilt from its
annotations alone by a brute-force loop here, κ and α of the provenance against scikit-learn and the
`krippendorff` package, and every refusal whole (exit 1, nothing written)."""

from __future__ import annotations

import datetime
import json
import math
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path

import krippendorff
import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from harness.errors import DatasetError
from harness.judging.merge import judgment_votes, merge_judgments


def _folder(tmp_path: Path, qrels: str | None = None, docs: int = 6, queries: int = 3) -> Path:
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i}"}) + "\n" for i in range(1, docs + 1))
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(1, queries + 1))
    )
    if qrels is not None:
        (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return root


def _csv(tmp_path: Path, name: str, rows: list[tuple[str, str, int, str]]) -> Path:
    path = tmp_path / name
    path.write_text("query_id,doc_id,grade,annotator\n" + "".join(f"{q},{d},{g},{a}\n" for q, d, g, a in rows))
    return path


def _merge(*args):
    return invoke(["judgments", "merge", *map(str, args)])


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
    scored = invoke(["-q", "evaluate", str(root), "--model", "bm25", "--k", "3"])
    assert scored.exit_code == 0, scored.output
    (result_file,) = (tmp_path / "results").rglob("test.json")
    assert json.loads(result_file.read_text())["config"]["qrels_provenance"] == recorded
    report = invoke(["report", "results", "--metric", "nDCG@3"])
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
        assert invoke(["-q", "evaluate", str(root), "--model", model]).exit_code == 0
    results = sorted(str(p) for p in (tmp_path / "results").rglob("test.json"))
    fused = invoke(["fuse", *results, "--json"])
    assert fused.exit_code == 0, fused.output
    assert json.loads(fused.output)["config"]["qrels_provenance"] == recorded


# --- the latest merge, whatever order the results come in ------------------------------------------------------


@settings(derandomize=True, deadline=None, max_examples=60)
@given(
    st.lists(
        st.datetimes(min_value=datetime.datetime(2020, 1, 1), max_value=datetime.datetime(2030, 1, 1)),
        min_size=1,
        max_size=6,
        unique=True,
    )
)
def test_a_splits_note_names_its_latest_merge_whatever_order_the_results_come_in(times):
    from harness.io.provenance import format_provenance, qrels_notes

    def record(when: datetime.datetime) -> dict:
        stamp = when.replace(tzinfo=datetime.timezone.utc).isoformat(timespec="seconds")  # as a merge writes it
        return {"merged_at": stamp, "annotators": {f"by-{stamp}": 1}, "policy": "majority", "scale": [0, 3]}

    records = [record(t.replace(microsecond=0)) for t in times]
    latest = record(max(times).replace(microsecond=0))
    (note,) = qrels_notes([("set", "test", r) for r in records] + [("set", "test", None)])
    assert note.startswith(f"set [test]: {format_provenance(latest)}")
    distinct = len({r["merged_at"] for r in records})
    assert (f"scored on {distinct} different merges" in note) == (distinct > 1)


class _Later:
    """`datetime` as the merge module sees it, a century on: a re-run happens later than the first merge."""

    import datetime as _real

    timezone = _real.timezone

    class datetime:
        @staticmethod
        def now(tz):
            return _Later._real.datetime(2099, 1, 1, tzinfo=tz)


@pytest.mark.parametrize("qrels_name", ["test.tsv", "test.tsv.gz"])
def test_running_the_same_merge_again_changes_no_byte_not_even_its_time(tmp_path, monkeypatch, qrels_name):
    import gzip

    import harness.judging.merge

    root = _folder(tmp_path)
    body = b"query-id\tcorpus-id\tscore\nq3\td6\t1\n"  # judged before any merge: the vote of 'qrels:test'
    (root / "qrels" / qrels_name).write_bytes(gzip.compress(body) if qrels_name.endswith(".gz") else body)
    votes = _csv(tmp_path, "g.csv", [("q1", "d1", 2, "alice"), ("q1", "d1", 1, "bob"), ("q2", "d3", 0, "alice")])
    assert _merge(root, votes).exit_code == 0
    before = _snapshot(root)
    times = {p: p.stat().st_mtime_ns for p in (root / "qrels").iterdir()}
    monkeypatch.setattr(harness.judging.merge, "datetime", _Later)
    again = _merge(root, votes)
    assert again.exit_code == 0, again.output
    assert _snapshot(root) == before  # byte for byte: the earlier merge's time kept
    assert {p: p.stat().st_mtime_ns for p in (root / "qrels").iterdir()} == times  # nothing rewritten
    assert _merge(root, _csv(tmp_path, "h.csv", [("q2", "d4", 1, "bob")])).exit_code == 0  # a new grade: a new merge
    assert json.loads((root / "qrels" / "test.provenance.json").read_text())["merged_at"].startswith("2099-01-01")


def test_a_merge_that_changes_nothing_reports_the_time_in_its_file_not_its_own(tmp_path, monkeypatch):
    import harness.judging.merge

    root = _folder(tmp_path)
    votes = _csv(tmp_path, "g.csv", [("q1", "d1", 2, "alice"), ("q1", "d1", 1, "bob"), ("q2", "d3", 0, "alice")])
    first = merge_judgments(root, [votes])
    monkeypatch.setattr(harness.judging.merge, "datetime", _Later)
    again = merge_judgments(root, [votes])  # the report of a merge that wrote nothing
    recorded = json.loads((root / "qrels" / "test.provenance.json").read_text())
    assert not recorded["merged_at"].startswith("2099")  # the test's premise: the file kept the first time
    assert again.provenance == recorded == first.provenance


@pytest.mark.parametrize(
    "rule",
    [{"policy": "max"}, {"policy": "mean"}, {"ties": "high"}, {"policy": "max", "ties": "high"}],
    ids=["max", "mean", "ties-high", "max-ties-high"],
)
def test_a_re_merge_by_another_rule_records_that_rule_and_its_time_though_no_grade_changes(tmp_path, monkeypatch, rule):
    import harness.judging.merge

    root = _folder(tmp_path)
    votes = _csv(tmp_path, "g.csv", [("q1", "d1", 2, "alice"), ("q1", "d1", 2, "bob"), ("q2", "d3", 0, "alice")])
    merge_judgments(root, [votes])
    qrels, records = _qrels(root), _records(root)
    assert qrels == {("q1", "d1"): 2, ("q2", "d3"): 0}  # no disagreement: every policy and tie rule gives these
    monkeypatch.setattr(harness.judging.merge, "datetime", _Later)
    report = merge_judgments(root, [votes], **rule)
    recorded = json.loads((root / "qrels" / "test.provenance.json").read_text())
    assert (recorded["policy"], recorded["ties"]) == (rule.get("policy", "majority"), rule.get("ties", "low"))
    assert recorded["merged_at"].startswith("2099-01-01")  # a merge by another rule is a new merge
    assert report.provenance == recorded
    assert _qrels(root) == qrels and _records(root) == records  # the same grades and votes


NAMES = ["**bob**", "smith, j", "[x](https://example.com)", "<b>c</b>", "a_b `c` | d", 'say "hi"', "a.b@c"]


def _note_names(listed: str) -> list[tuple[str, int]]:
    """The (name, count) pairs of a note's annotator list, read back by a scanner written here: a name is a JSON
    string or a run of characters other than space, comma and quote."""
    import re

    pairs, position = [], 0
    token = re.compile(r'("(?:[^"\\]|\\.)*"|[^\s,"]+) (\d+)(, |$)')
    while position < len(listed):
        match = token.match(listed, position)
        assert match, f"ambiguous at {listed[position:]!r}"
        name = json.loads(match[1]) if match[1].startswith('"') else match[1]
        pairs.append((name, int(match[2])))
        position = match.end()
    return pairs


@settings(derandomize=True, deadline=None, max_examples=60)
@given(st.lists(st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1), min_size=1))
def test_an_annotator_list_reads_back_exactly_whatever_the_names(names):
    from harness.io.provenance import format_provenance

    names = list(dict.fromkeys(names))
    note = format_provenance({"annotators": {name: n + 1 for n, name in enumerate(names)}, "scale": [0, 3]})
    listed = note.split(" annotators (", 1)[1].rsplit(") by ", 1)[0]
    assert _note_names(listed) == [(name, n + 1) for n, name in enumerate(names)]


@settings(derandomize=True, deadline=None, max_examples=80)
@given(st.text(st.characters(min_codepoint=32, max_codepoint=126) | st.sampled_from("καé"), max_size=40))
def test_a_plain_text_note_renders_as_typed_in_markdown(text):
    """The reference: CommonMark (markdown-it-py, with GitHub's tables and strike-through) renders the escaped note
    as exactly its text."""
    import html

    from markdown_it import MarkdownIt

    from harness.presentation import PlainText, markdown_table

    note = f"set [test]: from {text.strip()} x"
    rendered = markdown_table(["a"], [["1"]], [PlainText(note)]).split("\n\n", 1)[1].removesuffix("  ")
    page = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(rendered)
    expected = html.escape(note, quote=False).replace('"', "&quot;")
    assert page == f"<p>{expected}</p>\n"


def test_annotator_names_show_as_typed_in_a_markdown_report(tmp_path, monkeypatch):
    import html

    from markdown_it import MarkdownIt

    root = _folder(tmp_path)
    rows = [(f"q{1 + n % 3}", f"d{1 + n % 6}", n % 2, name) for n, name in enumerate(NAMES)]
    path = tmp_path / "g.csv"
    path.write_text(
        "query_id,doc_id,grade,annotator\n"
        + "".join(f'{q},{d},{g},"{a.replace(chr(34), 2 * chr(34))}"\n' for q, d, g, a in rows)
    )
    assert _merge(root, path).exit_code == 0
    monkeypatch.chdir(tmp_path)
    assert invoke(["-q", "evaluate", str(root), "--model", "bm25", "--k", "3"]).exit_code == 0
    report = invoke(["report", "results", "--metric", "nDCG@3", "--format", "markdown"])
    assert report.exit_code == 0, report.output
    line = next(line for line in report.output.splitlines() if "qrels merged" in line).removesuffix("  ")
    page = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(line)
    inner = page.removeprefix("<p>").removesuffix("</p>\n")
    assert page == f"<p>{inner}</p>\n" and "<" not in inner  # no markup: every name as text
    text = html.unescape(inner)
    listed = text.split(" annotators (", 1)[1].rsplit(") by ", 1)[0]
    assert sorted(_note_names(listed)) == sorted((name, 1) for name in NAMES)


# `judgments merge` reading what an earlier merge left: the recorded rule, the provenance, a hand-edited grade,
# an empty qrels file, and folders as sources of votes.
#
# Expected grades are worked out here by hand (the exact mean rounded, an exact half by the tie rule; the
# majority, a tie to the tie rule's side), never by `resolve`.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


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


def _four_doc_folder(tmp_path: Path) -> Path:
    return _folder(tmp_path, docs=4, queries=2)


def _qrels_with_header(root: Path) -> dict[tuple[str, str], int]:
    lines = (root / "qrels" / "test.tsv").read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    return {(q, d): int(g) for q, d, g in (line.split("\t") for line in lines[1:])}


def _edit_qrels(root: Path, pair: tuple[str, str], grade: int) -> None:
    grades = {**_qrels_with_header(root), pair: grade}
    body = "".join(f"{q}\t{d}\t{g}\n" for (q, d), g in sorted(grades.items()))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + body)


def _provenance(root: Path) -> Path:
    return root / "qrels" / "test.provenance.json"


def _first_merge(tmp_path: Path, **options) -> Path:
    root = _four_doc_folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    merge_judgments(root, [tmp_path / "g.csv"], **options)
    return root


def test_a_split_whose_qrels_file_holds_only_its_header_takes_a_merge(tmp_path):
    root = _four_doc_folder(tmp_path)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    (tmp_path / "g.csv").write_text(HEADER + "q1,d1,2,a\n")
    report = merge_judgments(root, [tmp_path / "g.csv"])
    assert _qrels_with_header(root) == {("q1", "d1"): 2} and report.added == 1


def test_the_provenance_left_beside_a_deleted_qrels_file_still_names_its_scale(tmp_path):
    root = _first_merge(tmp_path)  # merged on 0-3
    (root / "qrels" / "test.tsv").unlink()
    (root / "qrels" / "test.annotations.jsonl").unlink()
    (tmp_path / "h.csv").write_text(HEADER + "q1,d1,5,a\n")
    with pytest.raises(DatasetError, match=r"was merged on the scale 0-3, not 1-5"):
        merge_judgments(root, [tmp_path / "h.csv"], scale=(1, 5))
    assert not (root / "qrels" / "test.tsv").exists()


def test_a_provenance_without_a_scale_is_read_as_naming_none(tmp_path):
    root = _four_doc_folder(tmp_path)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    _provenance(root).write_text(json.dumps({"policy": "majority"}))
    (tmp_path / "g.csv").write_text(HEADER + "q1,d2,3,a\n")
    merge_judgments(root, [tmp_path / "g.csv"])
    assert _qrels_with_header(root) == {("q1", "d1"): 1, ("q1", "d2"): 3}


def test_every_hand_edit_after_the_last_merges_own_resolution_is_a_vote(tmp_path):
    root = _first_merge(tmp_path, policy="mean")
    # the mean merge gave (q1, d2) 1 (of 3 and 0, ties low): a grade no annotator gave, its own resolution.
    assert _qrels_with_header(root)[("q1", "d2")] == mean_by_hand([3, 0]) == 1
    _edit_qrels(root, ("q2", "d4"), 3)  # sorted after (q1, d2); a and b gave 1
    merge_judgments(root, [], policy="mean")
    assert _qrels_with_header(root)[("q2", "d4")] == mean_by_hand([1, 1, 3]) == 2
    assert _qrels_with_header(root)[("q1", "d2")] == 1


def _conflict_votes(report) -> dict[tuple[str, str], dict[str, int]]:
    return {(q, d): votes for q, d, votes in report.conflicts}


def test_the_recorded_policy_and_tie_rule_recognise_the_last_merges_own_resolution(tmp_path):
    # mean with ties high gave (q1, d2) 2: no annotator gave it; a later merge by another policy and tie rule
    # must read it as that merge's resolution (no qrels vote), not as a grade kept by hand.
    root = _first_merge(tmp_path, policy="mean", ties="high")
    assert _qrels_with_header(root)[("q1", "d2")] == mean_by_hand([3, 0], "high") == 2
    report = merge_judgments(root, [], policy="majority", ties="low")
    assert _conflict_votes(report)[("q1", "d2")] == {"a": 3, "b": 0}
    assert _qrels_with_header(root)[("q1", "d2")] == 0  # the majority of 3 and 0, a tie to the low side
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
        merge_judgments(_four_doc_folder(tmp_path), [], ties="sideways")


def test_a_written_merge_says_so_and_a_dry_one_does_not(tmp_path):
    root = _four_doc_folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    assert merge_judgments(root, [tmp_path / "g.csv"], write=False).written is False
    assert merge_judgments(root, [tmp_path / "g.csv"]).written is True


def test_the_agreement_is_measured_over_exactly_the_scales_grades(tmp_path):
    root = _four_doc_folder(tmp_path)
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
    root = _four_doc_folder(tmp_path)
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
