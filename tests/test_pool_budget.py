"""`pool --budget N --strategy depth|rrf|rbp`: the pairs kept are the N first by each strategy's priority,
computed again here by hand from the runs (best rank; Σ 1/(60 + rank); Σ 0.2·0.8^(rank − 1)), ties by query and
document; the same pool folder (blind page, manifest) as any pool; bad budgets refused before anything is written."""

from __future__ import annotations

import csv
import json
import random
import tempfile
from pathlib import Path

import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

DEPTH = 4


def _setup(tmp_path):
    rng = random.Random(21)
    root = tmp_path / "set"
    root.mkdir()
    docs = [f"d{i:02d}" for i in range(12)]
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "", "text": f"t {d}"}) + "\n" for d in docs)
    )
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": "x"}) + "\n" for i in range(5)))
    runs = {}
    for s in ("a", "b", "c"):
        runs[s] = {f"q{i}": rng.sample(docs, 6) for i in range(5)}
        (tmp_path / f"{s}.trec").write_text(
            "".join(f"{q} Q0 {d} {r + 1} {10 - r} {s}\n" for q, ranked in runs[s].items() for r, d in enumerate(ranked))
        )
    return root, runs


def _by_hand(runs, strategy: str, budget: int) -> set[tuple[str, str]]:
    ranks: dict[tuple[str, str], list[int]] = {}
    for run in runs.values():
        for q, ranked in run.items():
            for r, d in enumerate(ranked[:DEPTH]):
                ranks.setdefault((q, d), []).append(r + 1)
    return set(_ordered(ranks, strategy)[:budget])


def _pool(tmp_path, root, *args):
    command = ["pool", str(root), "--depth", str(DEPTH), *map(str, args)]
    for s in ("a", "b", "c"):
        command += ["--runs", str(tmp_path / f"{s}.trec")]
    return invoke(command)


@pytest.mark.parametrize("strategy", ["depth", "rrf", "rbp"])
def test_a_budget_keeps_the_first_pairs_by_the_strategy(tmp_path, strategy):
    root, runs = _setup(tmp_path)
    out = tmp_path / "pool"
    result = _pool(tmp_path, root, "--budget", 17, "--strategy", strategy, "--out", out)
    assert result.exit_code == 0, result.output
    with open(out / "pool.csv", encoding="utf-8", newline="") as handle:
        pooled = {(row["query_id"], row["doc_id"]) for row in csv.DictReader(handle)}
    assert pooled == _by_hand(runs, strategy, 17)
    manifest = json.loads((out / "manifest.json").read_text())
    full = len({(q, d) for run in runs.values() for q, ranked in run.items() for d in ranked[:DEPTH]})
    assert (manifest["budget"], manifest["strategy"], manifest["over_budget"]) == (17, strategy, full - 17)
    assert manifest["counts"]["pairs"] == 17 and (out / "judge.html").is_file()
    assert f"budget 17 pairs, judged first by {strategy}" in result.output


def test_the_strategies_differ_and_a_pool_without_budget_has_no_budget_fields(tmp_path):
    root, runs = _setup(tmp_path)
    assert len({frozenset(_by_hand(runs, s, 17)) for s in ("depth", "rrf", "rbp")}) > 1  # the test can tell them
    result = _pool(tmp_path, root, "--out", tmp_path / "whole")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "whole" / "manifest.json").read_text())
    assert not {"budget", "strategy", "over_budget"} & set(manifest)


@pytest.mark.parametrize(
    ("case", "args", "code", "expected"),
    [
        ("budget-zero", ["--budget", "0"], 1, "--budget 0: give a budget of at least 1 pair to judge, or none"),
        ("strategy-without-budget", ["--strategy", "rrf"], 2, "--strategy orders the pairs a --budget N judges"),
    ],
    ids=["budget-zero", "strategy-without-budget"],
)
def test_a_bad_budget_is_one_line_and_writes_nothing(tmp_path, case, args, code, expected):
    root, _ = _setup(tmp_path)
    result = _pool(tmp_path, root, *args, "--out", tmp_path / "pool")
    assert result.exit_code == code
    assert expected in result.output
    assert not (tmp_path / "pool").exists()


# --- `--add` under `--budget`: every added pair kept, the budget spent on the rest, in the strategy's order ---------


@st.composite
def _budget_cases(draw):
    docs = [f"d{i:02d}" for i in range(10)]
    queries = [f"q{i}" for i in range(3)]
    runs = {s: {q: draw(st.permutations(docs))[:6] for q in queries} for s in ("a", "b", "c")}
    every = st.tuples(st.sampled_from(queries), st.sampled_from(docs))
    judged = draw(st.lists(every, max_size=6, unique=True))
    added = draw(st.lists(every, min_size=1, max_size=8, unique=True))  # some pooled, some not, some judged
    return runs, judged, added, draw(st.integers(1, 25)), draw(st.sampled_from(["depth", "rrf", "rbp"]))


@settings(derandomize=True, deadline=None, max_examples=25)
@given(_budget_cases())
def test_added_pairs_are_kept_on_top_of_a_budget_spent_in_the_strategys_order(case):
    runs, judged, added, budget, strategy = case
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        root = tmp / "set"
        (root / "qrels").mkdir(parents=True)
        docs = sorted({d for run in runs.values() for ranked in run.values() for d in ranked} | {d for _, d in added})
        (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": f"t {d}"}) + "\n" for d in docs))
        (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": "x"}) + "\n" for i in range(3)))
        (root / "qrels" / "test.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in judged)
        )
        (tmp / "add.tsv").write_text("".join(f"{q}\t{d}\n" for q, d in added))
        command = ["pool", str(root), "--depth", str(DEPTH), "--add", str(tmp / "add.tsv"), "--out", str(tmp / "pool")]
        command += ["--budget", str(budget), "--strategy", strategy]
        for s, run in runs.items():
            (tmp / f"{s}.trec").write_text(
                "".join(f"{q} Q0 {d} {r + 1} {10 - r} {s}\n" for q, ranked in run.items() for r, d in enumerate(ranked))
            )
            command += ["--runs", str(tmp / f"{s}.trec")]
        result = invoke(command)
        assert result.exit_code == 0, result.output
        with open(tmp / "pool" / "pool.csv", encoding="utf-8", newline="") as handle:
            pooled = {(row["query_id"], row["doc_id"]) for row in csv.DictReader(handle)}
        manifest = json.loads((tmp / "pool" / "manifest.json").read_text())
    kept_added = set(added) - set(judged)
    ranks: dict[tuple[str, str], list[int]] = {}  # the pairs the budget orders: pooled, unjudged, not added
    for run in runs.values():
        for q, ranked in run.items():
            for r, d in enumerate(ranked[:DEPTH]):
                if (q, d) not in judged and (q, d) not in kept_added:
                    ranks.setdefault((q, d), []).append(r + 1)
    first = set(_ordered(ranks, strategy)[:budget])
    assert kept_added <= pooled  # every added pair, however low the budget
    assert pooled == first | kept_added
    assert manifest["over_budget"] == len(ranks) - len(first)


def _ordered(ranks: dict[tuple[str, str], list[int]], strategy: str) -> list[tuple[str, str]]:
    # The module's documented priorities, written again: best rank (then more systems at it), Σ 1/(60 + rank),
    # Σ 0.2·0.8^(rank − 1); ties by query, then document.
    def key(pair):
        rs = ranks[pair]
        if strategy == "depth":
            return (min(rs), -rs.count(min(rs)), pair)
        if strategy == "rrf":
            return (-sum(1 / (60 + r) for r in rs), pair)
        return (-sum(0.2 * 0.8 ** (r - 1) for r in rs), pair)

    return sorted(ranks, key=key)
