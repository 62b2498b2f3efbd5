"""The rules of `harness.reporting.labels` a user sees (mutation-testing holes of the labels module).

Every expected label and message is written out here by hand, or made by a brute-force rule written here
(a bracket balancer, a path splitter, a newest-per-configuration loop); none comes from the labels code.
Results are built directly (no fixture of conftest.py: this file runs with ``--noconftest``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.records import Result
from harness.reporting.labels import check_label, column_labels, display_label


def result(model="bm25", label="", *, inputs=None, config_hash="", created="", path=None, dataset="tiny"):
    return Result(
        dataset=dataset,
        split="test",
        model=model,
        metrics={"nDCG@10": 0.5},
        per_query={},
        n_queries=1,
        config={"inputs": inputs} if inputs is not None else {},
        fingerprints={},
        timings={},
        versions={},
        created=created,
        config_hash=config_hash,
        label=label,
        path=Path(path) if path else None,
    )


def refusal(label: str) -> str:
    with pytest.raises(HarnessError) as caught:
        check_label(label)
    return str(caught.value)


# -- check_label: what a user typing --name sees --------------------------------------------------------------


def balanced_by_hand(text: str) -> tuple[bool, str]:
    """(balanced, the message's tail) by a brute-force rule: repeatedly delete an adjacent matched pair of
    brackets (after dropping every other character); a closer left before any opener closes nothing."""
    brackets = "".join(c for c in text if c in "()[]{}")
    while any(pair in brackets for pair in ("()", "[]", "{}")):
        for pair in ("()", "[]", "{}"):
            brackets = brackets.replace(pair, "")
    return not brackets, brackets


@pytest.mark.parametrize(
    "label",
    [
        "f(a)",
        "[hnsw]",
        "{x}",
        "rrf(bm25, e5 [hnsw onnx-int8]; k={20})",
        "XLM-R (large)",  # a capital X is a letter, not a bracket
        "XGBoost [v2]",
    ],
)
def test_a_balanced_label_is_taken_as_written(label):
    assert balanced_by_hand(label)[0]
    assert check_label(f"  {label} ") == label


@pytest.mark.parametrize(
    "label, closer",
    [("a)", ")"), ("a]", "]"), ("a}", "}"), ("(a]", "]"), ("[a)", ")"), ("{a)", ")"), ("(a}", "}"), ("f(a))", ")")],
)
def test_a_closer_without_its_opener_is_refused_naming_it(label, closer):
    assert not balanced_by_hand(label)[0]
    assert refusal(label) == f"label {label!r}: a {closer!r} closes nothing; balance its brackets"


@pytest.mark.parametrize("label, opener", [("(a", "("), ("[a", "["), ("{a", "{"), ("f(a [b]", "(")])
def test_an_opener_never_closed_is_refused_naming_it(label, opener):
    assert balanced_by_hand(label) == (False, opener)
    assert refusal(label) == f"label {label!r}: a {opener!r} is never closed; balance its brackets"


@pytest.mark.parametrize("label", ["a\nb", "a\rb", "a\r\nb"])
def test_a_line_break_is_refused(label):
    assert refusal(label) == f"label {label!r} holds a line break; give a one-line label"


@pytest.mark.parametrize("label", ["", "   ", "\t"])
def test_an_empty_label_is_refused(label):
    assert refusal(label) == f"label {label!r} is empty; give a name, e.g. hybrid"


# -- display_label: model names shortened where they stand whole ----------------------------------------------


def short_by_hand(name: str) -> str:
    """A scheme prefix (``run:``, ``openai:``) kept; the last of two or more path components; else as given."""
    head = ""
    if ":" in name and not name.split(":", 1)[1].startswith("//") and name[0].isalpha() and name[0].islower():
        scheme = name.split(":", 1)[0]
        if all(c.islower() or c.isdigit() or c in "+-" for c in scheme):
            head, name = scheme + ":", name.split(":", 1)[1]
            parts = [p for p in name.replace("\\", "/").split("/") if p]
            return head + parts[-1] if len(parts) > 1 else head + name
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    return parts[-1] if len(parts) > 1 else name


@pytest.mark.parametrize(
    "model, shown",
    [
        ("run:out/x.trec", "run:x.trec"),
        ("run:results/bm25/test.trec", "run:test.trec"),
        ("openai:org/text-embedding-3-small", "openai:text-embedding-3-small"),
        ("./models/m/", "m"),
        ("org/sub/model", "model"),
        ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
        ("checkpoint/", "checkpoint/"),  # one component: nothing to cut, shown as given
        ("/e5", "/e5"),
        ("bm25", "bm25"),
    ],
)
def test_a_model_is_shown_by_its_last_path_component_keeping_its_scheme(model, shown):
    assert short_by_hand(model) == shown
    assert display_label(result(model=model)) == shown


def test_a_fusion_named_after_a_member_model_shows_it_short():
    # a fusion named with --name after its members; member 1's own label is a --name too, so only its
    # recorded model names "org/e5"
    fused = result(
        model="fusion",
        label="org/e5 + bm25",
        inputs=[{"model": "org/e5", "label": "tuned"}, {"model": "bm25", "label": "bm25"}],
    )
    assert display_label(fused) == "e5 + bm25"


def test_an_older_fusion_takes_the_first_word_of_each_members_label_as_its_model():
    # fusions written before members' models were recorded: only the first word of a member's label is a
    # model name; a later word (a --name's second word) is shown as written
    named = result(model="fusion", label="org/e5 + bm25", inputs=[{"label": "org/e5 [hnsw]"}, {"label": "bm25"}])
    assert display_label(named) == "e5 + bm25"
    worded = result(
        model="fusion", label="rrf(bm25, mine data/v2)", inputs=[{"label": "bm25"}, {"label": "mine data/v2"}]
    )
    assert display_label(worded) == "rrf(bm25, mine data/v2)"


def test_a_member_name_that_begins_with_another_members_name_is_shortened_whole():
    # "models/e5" begins "models/e5+ft/final": the longer name is shortened first, whole, never half
    fused = result(
        model="fusion",
        label="rrf(models/e5, models/e5+ft/final)",
        inputs=[{"model": "models/e5", "label": "models/e5"}, {"model": "models/e5+ft/final", "label": "x"}],
    )
    assert display_label(fused) == "rrf(e5, final)"


# -- column_labels: one column per configuration, the newest of each --------------------------------------------


def newest_by_hand(results):
    """The newest result of each configuration (hash, else file), by a loop: a result without a time is the
    oldest; of two with the same time, the later listed."""
    best = {}
    for r in results:
        key = r.config_hash or r.where
        if key not in best or (r.created or "") >= (best[key].created or ""):
            best[key] = r
    return best


def test_copies_of_one_configuration_show_the_newest_and_say_so():
    old = result(config_hash="aaaa1111bbbb2222", created="2024-01-01T00:00:00", path="/r/old/test.json")
    new = result(config_hash="aaaa1111bbbb2222", created="2024-06-01T00:00:00", path="/r/new/test.json")
    undated = result(config_hash="aaaa1111bbbb2222", created="", path="/r/undated/test.json")
    for order in ([old, new, undated], [new, old, undated], [undated, new, old], [new, undated, old]):
        notes: list[str] = []
        kept, labels = column_labels(order, notes)
        assert list(newest_by_hand(order).values()) == [new]
        assert kept == [new]
        assert labels == {id(new): "bm25"}
        assert notes == ["tiny × bm25: 3 results of 1 configuration(s); the newest of each is shown (/r/new/test.json)"]


def test_two_configurations_found_twice_each_are_both_named_in_the_note():
    a1 = result(config_hash="a" * 16, created="2024-01-01", path="/r/a1.json")
    a2 = result(config_hash="a" * 16, created="2024-02-01", path="/r/a2.json")
    b1 = result(config_hash="b" * 16, created="2024-03-01", path="/r/b1.json")
    notes: list[str] = []
    kept, _ = column_labels([a1, a2, b1], notes)
    assert kept == [a2, b1]
    assert notes[0] == (
        "tiny × bm25: 3 results of 2 configuration(s); the newest of each is shown (/r/a2.json, /r/b1.json)"
    )


def test_results_without_a_hash_are_told_apart_by_their_file():
    one, two = result(path="/r/one.json", created="2024-01-01"), result(path="/r/two.json", created="2024-01-01")
    notes: list[str] = []
    kept, labels = column_labels([one, two], notes)
    assert kept == [one, two]
    assert [labels[id(one)], labels[id(two)]] == ["bm25 #/r/one.j", "bm25 #/r/two.j"]


def test_one_result_a_label_gets_no_hash_and_no_note():
    notes: list[str] = []
    only = result(config_hash="0123456789abcdef", path="/r/only.json")
    other = result(model="org/e5", config_hash="fedcba9876543210", path="/r/e5.json")
    kept, labels = column_labels([only, other], notes)
    assert kept == [only, other]
    assert labels == {id(only): "bm25", id(other): "e5"}
    assert notes == []


def test_different_configurations_under_one_label_get_their_hash_and_a_note_with_the_fix():
    x = result(config_hash="0123456789abcdef", path="/r/x/test.json", label="mine")
    y = result(config_hash="fedcba9876543210", path="/r/y/test.json", label="mine")
    notes: list[str] = []
    kept, labels = column_labels([x, y], notes)
    assert kept == [x, y]
    assert labels == {id(x): "mine #01234567", id(y): "mine #fedcba98"}
    assert notes == [
        "tiny: 2 different systems are labelled 'mine' (/r/x/test.json as 'mine #01234567', /r/y/test.json as "
        "'mine #fedcba98'); give each its own label (bench --systems \"a=SYSTEM, b=SYSTEM\", or evaluate/fuse --name)"
    ]


def test_two_fusions_whose_short_labels_would_clash_keep_their_stored_labels():
    # rrf(a/m) and rrf(b/m) both shorten to rrf(m): two columns must never share a label
    a = result(model="fusion", label="rrf(a/m)", inputs=[{"model": "a/m", "label": "a/m"}], config_hash="1" * 16)
    b = result(model="fusion", label="rrf(b/m)", inputs=[{"model": "b/m", "label": "b/m"}], config_hash="2" * 16)
    c = result(model="fusion", label="rrf(c/n)", inputs=[{"model": "c/n", "label": "c/n"}], config_hash="3" * 16)
    _, labels = column_labels([a, b, c], [])
    assert labels == {id(a): "rrf(a/m)", id(b): "rrf(b/m)", id(c): "rrf(n)"}
