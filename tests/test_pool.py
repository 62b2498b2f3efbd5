"""`beir-harness pool`: TREC depth-k pools checked against a union computed here from the run files by hand,
with and without qrels, capped, extended, and the bad inputs (one line, exit 1, nothing written)."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.judging.pool import pool_runs
from harness.records import Run

N_QUERIES, N_DOCS, SYSTEMS = 6, 40, ("alpha", "beta", "gamma")


def _write_folder(root: Path, qrels: dict[str, dict[str, int]] | None) -> Path:
    root.mkdir(parents=True)
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for d in range(N_DOCS):
            handle.write(json.dumps({"_id": f"d{d:02d}", "title": f"title {d}", "text": f"text of {d}"}) + "\n")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as handle:
        for q in range(N_QUERIES):
            handle.write(json.dumps({"_id": f"q{q}", "text": f"query {q}"}) + "\n")
    if qrels is not None:
        (root / "qrels").mkdir()
        lines = [f"{q}\t{d}\t{g}" for q, docs in qrels.items() for d, g in docs.items()]
        (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")
    return root


def _write_runs(root: Path, seed: int = 7) -> list[Path]:
    """One TREC run per system: 15 random documents per query with distinct scores, lines in a shuffled order
    (so a pool that trusted the file's order instead of the scores would differ)."""
    rng = random.Random(seed)
    paths = []
    for system in SYSTEMS:
        lines = []
        for q in range(N_QUERIES):
            docs = rng.sample(range(N_DOCS), 15)
            scores = rng.sample(range(1000), 15)
            lines += [f"q{q} Q0 d{d:02d} 0 {s / 10} {system}" for d, s in zip(docs, scores)]
        rng.shuffle(lines)
        paths.append(root / f"{system}.trec")
        paths[-1].write_text("\n".join(lines) + "\n")
    return paths


def _expected(paths: list[Path], depth: int, judged: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The pool by hand: each file's top `depth` by score per query, united, minus the judged pairs."""
    pairs = set()
    for path in paths:
        by_query: dict[str, list[tuple[float, str]]] = {}
        for line in path.read_text().splitlines():
            query_id, _, doc_id, _, score, _ = line.split()
            by_query.setdefault(query_id, []).append((float(score), doc_id))
        for query_id, scored in by_query.items():
            pairs |= {(query_id, doc_id) for _, doc_id in sorted(scored, reverse=True)[:depth]}
    return pairs - judged


def _pool_pairs(out: Path) -> set[tuple[str, str]]:
    with open(out / "pool.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(row["grade"] == "" for row in rows)
    return {(row["query_id"], row["doc_id"]) for row in rows}


def _pool(args: list[str]):
    return invoke(["pool", *map(str, args)])


PARTIAL = {"q0": {"d00": 1, "d01": 0, "d02": 2}, "q3": {f"d{d:02d}": 1 for d in range(0, 40, 2)}}


@pytest.mark.parametrize("depth", [1, 3, 10])
@pytest.mark.parametrize("qrels", [None, PARTIAL], ids=["no-qrels", "partial-qrels"])
def test_the_pool_is_the_union_of_each_top_depth_minus_the_judged_pairs(tmp_path, depth, qrels):
    folder = _write_folder(tmp_path / "set", qrels)
    runs = _write_runs(tmp_path)
    out = tmp_path / "pool"
    result = _pool([folder, *sum((["--runs", p] for p in runs), []), "--depth", depth, "--out", out])
    assert result.exit_code == 0, result.output
    judged = {(q, d) for q, docs in (qrels or {}).items() for d in docs}
    expected = _expected(runs, depth, judged)
    assert _pool_pairs(out) == expected
    assert expected and (qrels is None or _expected(runs, depth, set()) != expected)  # the judged pairs mattered
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["pairs"] == len(expected) and manifest["depth"] == depth
    assert [s["name"] for s in manifest["systems"]] == list(SYSTEMS)
    assert set(manifest["fingerprints"]) == {"corpus", "queries", "qrels"}
    assert bool(manifest["fingerprints"]["qrels"]) == (qrels is not None)
    jsonl = [json.loads(line) for line in (out / "pool.jsonl").read_text().splitlines()]
    assert {(r["query_id"], r["doc_id"]) for r in jsonl} == expected
    assert all(r["grade"] is None and r["text"] == f"text of {int(r['doc_id'][1:])}" for r in jsonl)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["set", "pool", *(p.name for p in runs)])


def test_a_header_only_qrels_file_judges_nothing(tmp_path):
    folder = _write_folder(tmp_path / "set", {})
    runs = _write_runs(tmp_path)
    assert (folder / "qrels" / "test.tsv").read_text().strip() == "query-id\tcorpus-id\tscore"
    result = _pool([folder, "--runs", runs[0], "--depth", 4, "--out", tmp_path / "pool"])
    assert result.exit_code == 0, result.output
    assert _pool_pairs(tmp_path / "pool") == _expected([runs[0]], 4, set())


def test_systems_pick_runs_by_tag_and_the_split_limits_what_counts_as_judged(tmp_path):
    folder = _write_folder(tmp_path / "set", PARTIAL)
    runs = _write_runs(tmp_path)
    out = tmp_path / "pool"
    result = _pool(
        [
            folder,
            "--runs",
            runs[0],
            "--runs",
            runs[1],
            "--runs",
            runs[2],
            "--systems",
            "gamma, alpha",
            "--depth",
            5,
            "--out",
            out,
        ]
    )
    assert result.exit_code == 0, result.output
    judged = {(q, d) for q, docs in PARTIAL.items() for d in docs}
    assert _pool_pairs(out) == _expected([runs[2], runs[0]], 5, judged)


def test_a_cap_keeps_each_systems_best_documents_round_robin(tmp_path):
    folder = _write_folder(tmp_path / "set", None)
    runs = _write_runs(tmp_path)
    out = tmp_path / "pool"
    result = _pool([folder, *sum((["--runs", p] for p in runs), []), "--depth", 10, "--max-per-query", 4, "--out", out])
    assert result.exit_code == 0, result.output
    pooled, union = _pool_pairs(out), _expected(runs, 10, set())
    top2 = [_expected([p], 1, set()) for p in runs]  # each system's rank 1 is taken before anyone's rank 2
    for q in range(N_QUERIES):
        mine = {d for qq, d in pooled if qq == f"q{q}"}
        assert len(mine) == min(4, len({d for qq, d in union if qq == f"q{q}"}))
        assert all((f"q{q}", d) in union for d in mine)
        assert all({d for qq, d in top if qq == f"q{q}"} <= mine for top in top2)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["capped_out"] == len(union) - len(pooled) > 0


def test_added_pairs_are_pooled_on_top_unless_judged(tmp_path):
    folder = _write_folder(tmp_path / "set", PARTIAL)
    runs = _write_runs(tmp_path)
    add = tmp_path / "add.tsv"
    add.write_text("query-id\tcorpus-id\nq5\td39\nq0\td00\nq1,d38\n")
    out = tmp_path / "pool"
    result = _pool([folder, "--runs", runs[0], "--depth", 1, "--max-per-query", 1, "--add", add, "--out", out])
    assert result.exit_code == 0, result.output
    judged = {(q, d) for q, docs in PARTIAL.items() for d in docs}
    assert _pool_pairs(out) == _expected([runs[0]], 1, judged) | {("q5", "d39"), ("q1", "d38")}


def test_systems_are_retrieved_on_a_folder_without_qrels(tmp_path):
    folder = _write_folder(tmp_path / "set", None)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{d}", "text": f"word{d % 5} common"}) + "\n" for d in range(20))
    )
    (folder / "queries.jsonl").write_text('{"_id": "q0", "text": "word1"}\n{"_id": "q1", "text": "word2 common"}\n')
    out = tmp_path / "pool"
    result = _pool([folder, "--systems", "bm25", "--depth", 3, "--out", out])
    assert result.exit_code == 0, result.output
    run_file = out / "runs" / "1-bm25.trec"
    assert _pool_pairs(out) == _expected([run_file], 3, set()) and len(_pool_pairs(out)) == 6


def test_the_page_holds_no_system_rank_or_score(tmp_path):
    folder = _write_folder(tmp_path / "set", None)
    runs = _write_runs(tmp_path)
    out = tmp_path / "pool"
    assert _pool([folder, *sum((["--runs", p] for p in runs), []), "--depth", 10, "--out", out]).exit_code == 0
    html = (out / "judge.html").read_text()
    block = re.search(r'<script type="application/json" id="pool-data">(.*?)</script>', html, re.S).group(1)
    assert not any(name in block for name in SYSTEMS) and '"score' not in block and '"rank' not in block
    data = json.loads(block)
    assert set(data) == {"pool_id", "title", "scale", "guidelines", "queries", "docs", "items", "copies"}
    assert {tuple(item) for item in data["items"]} == _pool_pairs(out)
    assert [s["grade"] for s in data["scale"]] == [0, 1, 2, 3]


# --------------------------------------------------------------------------- bad input


def _bad(tmp_path, case: str):
    folder = _write_folder(tmp_path / "set", PARTIAL)
    runs = _write_runs(tmp_path)
    add = tmp_path / "add.tsv"
    add.write_text({"add-unknown-query": "q0\td01\nq99\td01\n", "add-unknown-doc": "q0\tnope\n"}.get(case, ""))
    (tmp_path / "g.json").write_text(
        {
            "guidelines-not-json": "{scale: [",
            "scale-repeats-a-grade": '{"scale": [{"grade": 1, "label": "a"}, {"grade": 1, "label": "b"}]}',
        }.get(case, "{}")
    )
    (tmp_path / "other.trec").write_text("q0 Q0 d01 1 2.0 other\nq0 Q0 x99 2 1.0 other\n")
    args = {
        "system-without-run": ["--runs", runs[0], "--systems", "alpha,delta"],
        "guidelines-not-json": ["--runs", runs[0], "--guidelines", tmp_path / "g.json"],
        "scale-repeats-a-grade": ["--runs", runs[0], "--guidelines", tmp_path / "g.json"],
        "run-of-another-corpus": ["--runs", tmp_path / "other.trec"],
        "depth-zero": ["--runs", runs[0], "--depth", 0],
        "add-unknown-query": ["--runs", runs[0], "--add", add],
        "add-unknown-doc": ["--runs", runs[0], "--add", add],
    }[case]
    return _pool([folder, *args, "--out", tmp_path / "pool"])


@pytest.mark.parametrize(
    ("case", "message"),
    [
        pytest.param(case, message, id=case)
        for case, message in [
            ("system-without-run", "system 'delta': no run among the run files (alpha (alpha.trec)); add its run file"),
            ("depth-zero", "pool depth 0: pool at least the top 1 document of each system"),
            ("add-unknown-query", "add.tsv:2: unknown query id 'q99'"),
            ("add-unknown-doc", "add.tsv:1: unknown document id 'nope'"),
            ("guidelines-not-json", "g.json: not a guidelines file: "),
            (
                "scale-repeats-a-grade",
                "g.json: grade scale [1, 1]: grades must be distinct integers 0-9 (one key each)",
            ),
            ("run-of-another-corpus", "other.trec: document 'x99' (query 'q0') is not in the folder's corpus.jsonl"),
        ]
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, case, message):
    result = _bad(tmp_path, case)
    assert result.exit_code == 1, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "pool").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_existing_pool_is_never_overwritten(tmp_path):
    folder = _write_folder(tmp_path / "set", None)
    runs = _write_runs(tmp_path)
    out = tmp_path / "pool"
    out.mkdir()
    (out / "judgments.csv").write_text("precious\n")
    result = _pool([folder, "--runs", runs[0], "--out", out])
    assert result.exit_code == 1 and "already exists" in result.output
    assert (out / "judgments.csv").read_text() == "precious\n"


def test_a_result_file_pools_the_run_it_was_scored_on(tiny_beir, tmp_path):
    results = tmp_path / "results"
    evaluated = invoke(
        ["evaluate", str(tiny_beir), "--model", "bm25", "--top-k", "5", "--k", "5", "--output-dir", str(results)]
    )
    assert evaluated.exit_code == 0, evaluated.output
    (result_file,) = results.rglob("*.json")
    (run_file,) = results.rglob("*.run.trec")
    out = tmp_path / "pool"
    result = _pool([tiny_beir, "--runs", result_file, "--depth", 3, "--out", out])
    assert result.exit_code == 0, result.output
    judged = {
        tuple(line.split("\t")[:2])
        for path in (tiny_beir / "qrels").glob("*.tsv")
        for line in path.read_text().splitlines()[1:]
        if line.strip()
    }
    assert _pool_pairs(out) == _expected([run_file], 3, judged) != set()
    assert json.loads((out / "manifest.json").read_text())["systems"][0]["name"].startswith("bm25")


def test_guidelines_bring_their_scale_and_text_to_the_manifest_and_page(tmp_path):
    folder = _write_folder(tmp_path / "set", None)
    runs = _write_runs(tmp_path)
    scale = [
        {"grade": 0, "label": "No", "definition": "off topic"},
        {"grade": 1, "label": "Partly", "definition": ""},
        {"grade": 2, "label": "Yes", "definition": "answers it"},
    ]
    (tmp_path / "g.json").write_text(json.dumps({"scale": scale, "guidelines": "Be strict."}))
    (tmp_path / "g.txt").write_text("Judge by the first paragraph.\n")
    cases = (("g.json", scale, "Be strict."), ("g.txt", None, "Judge by the first paragraph."))
    for name, want_scale, want_text in cases:
        out = tmp_path / f"pool-{name}"
        result = _pool([folder, "--runs", runs[0], "--guidelines", tmp_path / name, "--out", out])
        assert result.exit_code == 0, result.output
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["guidelines"] == want_text
        assert [s["grade"] for s in manifest["grade_scale"]] == ([0, 1, 2] if want_scale else [0, 1, 2, 3])
        if want_scale:
            assert manifest["grade_scale"] == scale
        assert json.dumps(want_text)[1:-1] in (out / "judge.html").read_text()


# Depth-k pooling of systems whose runs differ in length.
#
# Runs of one length hide which run a cap or a depth cuts. Here systems return 1, 3, 5 and 8
# documents a query (and some none), pooled at depths below, between and above those lengths. The reference
# is a brute-force loop written here: the uncapped pool is the union of each run's first `depth` documents
# minus the judged ones; under a cap, round-robin by rank means a document whose best rank is r is kept only
# after every document with a better best rank (whatever order the systems are visited in).
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


QUERIES = ("q1", "q2", "q3")


def make_runs(seed=0):
    """Four systems; system s returns LENGTHS[s] documents for q1 and q2 (from a shared set of 12, so
    they overlap), and only systems 2 and 3 answer q3."""
    rng = random.Random(seed)
    lengths = (1, 3, 5, 8)
    runs = []
    for system, length in enumerate(lengths):
        scores = {}
        for query in QUERIES:
            if query == "q3" and system < 2:
                continue
            docs = rng.sample([f"d{i}" for i in range(12)], length)
            scores[query] = {doc: float(length - rank) for rank, doc in enumerate(docs)}  # ranked as sampled
        runs.append(Run(scores, name=f"s{system}"))
    return runs


def tops_by_hand(runs, query, depth):
    """Each system's first `depth` documents for `query`, in rank order (from the scores, by hand)."""
    out = []
    for run in runs:
        scores = dict((s.doc_id, s.score) for s in run.get(query, ()))
        ranked = sorted(scores, key=lambda d: (-scores[d], d))
        out.append(ranked[:depth])
    return out


def best_rank_by_hand(tops, judged):
    best = {}
    for ranked in tops:
        for rank, doc in enumerate(ranked):
            if doc not in judged:
                best[doc] = min(best.get(doc, rank), rank)
    return best


JUDGED = {"q1": {"d0", "d5"}, "q3": {"d11"}}


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 7, 8, 20])
def test_the_uncapped_pool_takes_each_systems_own_top_depth(depth):
    runs = make_runs()
    pool = pool_runs(runs, depth, JUDGED)
    expected, dropped = {}, 0
    for query in QUERIES:
        tops = tops_by_hand(runs, query, depth)
        union = {doc for ranked in tops for doc in ranked}
        judged = JUDGED.get(query, set())
        dropped += len(union & judged)
        if union - judged:
            expected[query] = sorted(union - judged)
    assert pool.pairs == expected
    assert pool.judged_dropped == dropped
    assert pool.capped_out == 0 and pool.added == 0


@pytest.mark.parametrize("depth", [2, 4, 8])
@pytest.mark.parametrize("cap", [1, 2, 3, 5, 6, 9, 30])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_cap_keeps_the_best_ranked_documents_of_runs_of_any_length(depth, cap, seed):
    runs = make_runs(seed)
    pool = pool_runs(runs, depth, JUDGED, max_per_query=cap, seed=seed)
    capped = 0
    for query in QUERIES:
        tops = tops_by_hand(runs, query, depth)
        best = best_rank_by_hand(tops, JUDGED.get(query, set()))
        kept = set(pool.pairs.get(query, ()))
        assert kept <= set(best)
        assert len(kept) == min(cap, len(best))
        capped += len(best) - len(kept)
        if kept:
            worst_kept = max(best[d] for d in kept)
            # round-robin by rank: everything ranked better than the worst kept document is kept too
            assert {d for d, r in best.items() if r < worst_kept} <= kept
    assert pool.capped_out == capped


def test_a_short_run_listed_first_does_not_shorten_the_others():
    short = Run({"q": {"a": 1.0}}, name="short")
    long = Run({"q": {"b": 3.0, "c": 2.0, "d": 1.0}}, name="long")
    for runs in ([short, long], [long, short]):
        assert pool_runs(runs, 3, {}).pairs == {"q": ["a", "b", "c", "d"]}
        assert pool_runs(runs, 2, {}).pairs == {"q": ["a", "b", "c"]}


def test_a_system_without_the_query_adds_nothing_and_breaks_nothing():
    runs = [Run({"q1": {"a": 1.0}}, name="x"), Run({"q2": {"b": 2.0, "c": 1.0}}, name="y")]
    assert pool_runs(runs, 5, {}).pairs == {"q1": ["a"], "q2": ["b", "c"]}
    assert pool_runs(runs, 5, {}, max_per_query=1).pairs == {"q1": ["a"], "q2": ["b"]}


def test_extra_pairs_sit_on_top_of_the_cap_unless_judged_or_pooled():
    runs = [Run({"q": {"a": 3.0, "b": 2.0, "c": 1.0}}, name="x")]
    pool = pool_runs(runs, 3, {"q": {"j"}}, max_per_query=1, extra=[("q", "z"), ("q", "a"), ("q", "j"), ("r", "y")])
    assert pool.pairs == {"q": ["a", "z"], "r": ["y"]}
    assert (pool.added, pool.judged_dropped, pool.capped_out) == (2, 1, 2)


def _refused(spec):
    from harness.errors import HarnessError
    from harness.judging.pool import check_spec

    with pytest.raises(HarnessError) as caught:
        check_spec(spec)
    return str(caught.value)


def test_a_pool_spec_is_checked_at_its_bounds():
    from harness.judging.pool import PoolSpec, check_spec

    check_spec(PoolSpec(depth=1, max_per_query=1))
    check_spec(PoolSpec(depth=1, max_per_query=None))
    check_spec(PoolSpec(scale=({"grade": 0}, {"grade": 9})))
    assert _refused(PoolSpec(depth=0)) == (
        "pool depth 0: pool at least the top 1 document of each system (set `depth` ≥ 1; TREC pools use 10 to 100)"
    )
    assert _refused(PoolSpec(max_per_query=0)) == "max per query 0: give a cap ≥ 1, or none"
    message = "grade scale {}: grades must be distinct integers 0-9 (one key each)"
    for grades in ([], [1, 1], [10], [-1], [True], ["1"], [1.0], [None]):
        assert _refused(PoolSpec(scale=tuple({"grade": g} for g in grades))) == message.format(grades)


def test_no_system_wins_every_tie_under_a_cap():
    # two systems, disjoint documents, a cap of one: which system's rank 1 is kept is the seeded per-query order
    queries = [f"q{i}" for i in range(40)]
    a = Run({q: {f"a-{q}": 1.0} for q in queries}, name="a")
    b = Run({q: {f"b-{q}": 1.0} for q in queries}, name="b")
    for seed in (0, 1):
        kept = pool_runs([a, b], 1, {}, max_per_query=1, seed=seed).pairs
        winners = [kept[q][0][0] for q in queries]
        assert 5 < winners.count("a") < 35  # each system first in some queries (40 fair coin flips)
    first, other = (pool_runs([a, b], 1, {}, max_per_query=1, seed=s).pairs for s in (0, 1))
    assert first != other  # the seed decides the order
    assert pool_runs([a, b], 1, {}, max_per_query=1, seed=0).pairs == first  # and the same seed the same pool


def capped_pool_by_hand(runs, depth, cap, seed):
    """The documented, reproducible order: for each query, the systems shuffled by Python's
    ``random.Random(f"{seed}:{query}")``, then round-robin by rank until the cap (nothing judged here)."""
    pairs = {}
    for query in sorted({q for run in runs for q in run}):
        tops = tops_by_hand(runs, query, depth)
        order = list(range(len(runs)))
        random.Random(f"{seed}:{query}").shuffle(order)
        kept = []
        for rank in range(depth):
            for system in order:
                if rank < len(tops[system]) and tops[system][rank] not in kept:
                    kept.append(tops[system][rank])
        pairs[query] = sorted(kept[:cap])
    return pairs


def test_a_manifests_seed_reproduces_its_pool_and_the_default_is_the_manifests():
    # a pool written with the default seed records seed 0 in its manifest (PoolSpec's default): rerunning
    # with that seed, or with no seed at all, must give the very same pairs to judge
    from harness.judging.pool import PoolSpec

    queries = [f"q{i}" for i in range(30)]
    runs = [Run({q: {f"{name}-{q}-{r}": 3.0 - r for r in range(3)} for q in queries}, name=name) for name in "abc"]
    recorded = PoolSpec().seed
    assert recorded == 0
    for seed in (0, 1, 5):
        assert pool_runs(runs, 3, {}, max_per_query=2, seed=seed).pairs == capped_pool_by_hand(runs, 3, 2, seed)
    assert pool_runs(runs, 3, {}, max_per_query=2).pairs == capped_pool_by_hand(runs, 3, 2, recorded)
    assert capped_pool_by_hand(runs, 3, 2, 0) != capped_pool_by_hand(runs, 3, 2, 1)  # the seed decides something


def test_every_judged_extra_pair_is_counted_dropped():
    runs = [Run({"q": {"a": 2.0, "j1": 1.0}}, name="x")]
    judged = {"q": {"j1", "j2", "j3"}, "r": {"k"}}
    extra = [("q", "j2"), ("q", "j3"), ("r", "k"), ("q", "z")]
    pool = pool_runs(runs, 2, judged, extra=extra)
    # by hand: j1 pooled but judged (1), then j2, j3 and k asked for but judged (3); z added
    assert pool.pairs == {"q": ["a", "z"]}
    assert (pool.judged_dropped, pool.added, pool.capped_out) == (4, 1, 0)
