"""`beir-harness pool --status`: how much of a pool is judged, counted here by hand from the pool's CSV and the
judgments' own lines (page exports in the pool folder, a file given with --judgments, grades merged into the
qrels), a stale pool warned about, and the bad inputs (one line, exit 1)."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path

import pytest
from cli_runner import invoke

N_QUERIES, N_DOCS = 8, 30


def _folder(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{d:02d}", "title": "", "text": f"doc {d}"}) + "\n" for d in range(N_DOCS))
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{q}", "text": f"query {q}"}) + "\n" for q in range(N_QUERIES))
    )
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td00\t1\n")
    return root


def _run(path: Path, seed: int) -> Path:
    rng = random.Random(seed)
    path.write_text(
        "".join(
            f"q{q} Q0 d{d:02d} {r + 1} {100 - r} sys{seed}\n"
            for q in range(N_QUERIES)
            for r, d in enumerate(rng.sample(range(N_DOCS), 8))
        )
    )
    return path


def _invoke(*args) -> object:
    return invoke([*map(str, args)])


@pytest.fixture
def pool(tmp_path) -> tuple[Path, Path, str]:
    """(the dataset, the pool folder, its id): two random runs pooled at depth 5."""
    folder = _folder(tmp_path / "set")
    result = _invoke(
        "pool",
        folder,
        "--runs",
        _run(tmp_path / "a.trec", 1),
        "--runs",
        _run(tmp_path / "b.trec", 2),
        "--depth",
        5,
        "--out",
        tmp_path / "pool",
    )
    assert result.exit_code == 0, result.output
    return folder, tmp_path / "pool", json.loads((tmp_path / "pool" / "manifest.json").read_text())["pool_id"]


def _pool_pairs(pool: Path) -> set[tuple[str, str]]:
    with open(pool / "pool.csv", encoding="utf-8", newline="") as handle:
        return {(row["query_id"], row["doc_id"]) for row in csv.DictReader(handle)}


def _judge(pairs, share: float, seed: int, extra=()) -> list[tuple[str, str, int]]:
    rng = random.Random(seed)
    return [(q, d, rng.randrange(4)) for q, d in sorted(pairs) if rng.random() < share] + list(extra)


def _write_csv(path: Path, annotator: str, grades) -> Path:
    path.write_text("query_id,doc_id,grade,annotator\n" + "".join(f"{q},{d},{g},{annotator}\n" for q, d, g in grades))
    return path


def test_status_counts_every_source_as_a_loop_over_the_files_does(pool, tmp_path):
    folder, pool_dir, pool_id = pool
    pairs = _pool_pairs(pool_dir)
    # Queries 0-1 left for nobody, so "not at all" is not empty; everybody else judges a random share.
    open_pairs = sorted(p for p in pairs if p[0] not in ("q0", "q1"))
    alice = _judge(open_pairs, 0.6, 1)
    bob = _judge(open_pairs, 0.3, 2, extra=[("q0", "d29", 1)] if ("q0", "d29") not in pairs else [])
    carol = _judge(open_pairs, 0.2, 3)
    _write_csv(pool_dir / f"judgments-{pool_id}-alice.csv", "alice", alice)  # the page's export, in the pool folder
    (pool_dir / f"judgments-{pool_id}-dan.qrels").write_text(  # its TREC export: the annotator is in the name
        "".join(f"{q} 0 {d} {g}\n" for q, d, g in _judge(open_pairs, 0.1, 4))
    )
    bob_file = _write_csv(tmp_path / "bob.csv", "bob", bob)
    merged = _invoke("judgments", "merge", folder, _write_csv(tmp_path / "carol.csv", "carol", carol))
    assert merged.exit_code == 0, merged.output
    hand = sorted(set(open_pairs) - {(q, d) for q, d, _ in carol})[0]  # a grade typed into the qrels by hand
    with open(folder / "qrels" / "test.tsv", "a") as handle:
        handle.write(f"{hand[0]}\t{hand[1]}\t2\n")

    result = _invoke("pool", "--status", pool_dir, "--judgments", bob_file, "--json")
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)

    # The same by hand: each source's lines, as written, kept where they name a pool pair.
    sources = {
        "alice": [(q, d) for q, d, _ in alice],
        "bob": [(q, d) for q, d, _ in bob],
        "carol": [(q, d) for q, d, _ in carol],
        "qrels:test": [hand],
    }
    sources["dan"] = [
        (line.split()[0], line.split()[2])
        for line in (pool_dir / f"judgments-{pool_id}-dan.qrels").read_text().splitlines()
    ]
    judged = {p for found in sources.values() for p in found if p in pairs}
    per_query = {}
    for q, d in pairs:
        entry = per_query.setdefault(q, {"pairs": 0, "judged": 0})
        entry["pairs"] += 1
        entry["judged"] += (q, d) in judged
    states = {"full": 0, "partial": 0, "none": 0}
    for entry in per_query.values():
        states["full" if entry["judged"] == entry["pairs"] else "partial" if entry["judged"] else "none"] += 1
    assert (status["pairs"], status["judged"]) == (len(pairs), len(judged))
    assert status["per_query"] == per_query and status["queries"] == states
    assert states["none"] >= 2 and states["partial"] >= 1 and 0 < len(judged) < len(pairs)
    assert status["annotators"] == {name: len({p for p in found if p in pairs}) for name, found in sources.items()}
    assert {s["source"]: s["outside_pool"] for s in status["sources"]}[str(bob_file)] == len(bob) - len(
        [p for p in sources["bob"] if p in pairs]
    )
    by_source = {s["source"]: (s["pool_pairs"], s["outside_pool"]) for s in status["sources"]}
    assert by_source["qrels/test.tsv"] == (len({(q, d) for q, d, _ in carol} | {hand}), 0)  # q0 d00: no stray
    assert status["stale"] == []

    text = _invoke("pool", "--status", pool_dir, "--judgments", bob_file).stdout
    share = 100 * len(judged) / len(pairs)
    assert text.startswith(
        f"{pool_dir}: {len(judged)} of {len(pairs)} pairs judged ({share:.1f}"
        f"%); {len(per_query)} queries: {states['full']} fully judged, {states['partial']} partly, "
        f"{states['none']} not at all\n"
    )
    assert f"  annotator alice: {status['annotators']['alice']} pairs\n" in text


def test_a_fresh_pool_is_unjudged_and_a_merged_one_complete(pool, tmp_path):
    folder, pool_dir, _ = pool
    pairs = _pool_pairs(pool_dir)
    before = json.loads(_invoke("pool", "--status", pool_dir, "--json").stdout)
    assert (before["judged"], before["queries"]["none"], before["annotators"]) == (0, len({q for q, _ in pairs}), {})
    everything = _write_csv(tmp_path / "all.csv", "eve", [(q, d, 0) for q, d in sorted(pairs)])
    assert _invoke("judgments", "merge", folder, everything).exit_code == 0
    after = json.loads(_invoke("pool", "--status", pool_dir, "--json").stdout)
    assert (after["judged"], after["queries"]["partial"], after["queries"]["none"]) == (len(pairs), 0, 0)
    assert after["annotators"] == {"eve": len(pairs)}


def test_a_trec_file_without_annotators_is_judged_by_its_file_name(pool, tmp_path):
    _, pool_dir, _ = pool
    q, d = sorted(_pool_pairs(pool_dir))[0]
    (tmp_path / "erin.qrels").write_text(f"{q} 0 {d} 2\n")
    status = json.loads(_invoke("pool", "--status", pool_dir, "--judgments", tmp_path / "erin.qrels", "--json").stdout)
    assert (status["judged"], status["annotators"]) == (1, {"erin": 1})


def test_an_llms_grades_count_only_when_given(pool):
    _, pool_dir, _ = pool
    q, d = sorted(_pool_pairs(pool_dir))[0]
    llm = _write_csv(pool_dir / "judgments-llm_tiny.csv", "llm:tiny", [(q, d, 3)])
    status = json.loads(_invoke("pool", "--status", pool_dir, "--json").stdout)
    assert (status["judged"], status["annotators"], status["not_counted"]) == (0, {}, [str(llm)])
    status = json.loads(_invoke("pool", "--status", pool_dir, "--judgments", llm, "--json").stdout)
    assert (status["judged"], status["annotators"], status["not_counted"]) == (1, {"llm:tiny": 1}, [])


def test_a_pool_of_changed_data_is_stale(pool):
    folder, pool_dir, _ = pool
    with open(folder / "corpus.jsonl", "a") as handle:
        handle.write(json.dumps({"_id": "d99", "title": "", "text": "new"}) + "\n")
    result = _invoke("pool", "--status", pool_dir, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["stale"] == ["corpus"]
    assert "corpus changed since the pool was made" in result.stderr and "pool again" in result.stderr


def test_the_dataset_argument_overrides_the_manifests(pool, tmp_path):
    folder, pool_dir, _ = pool
    moved = folder.rename(tmp_path / "moved")
    assert _invoke("pool", "--status", pool_dir).exit_code == 1  # the manifest's folder is gone
    result = _invoke("pool", moved, "--status", pool_dir, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["pairs"] == len(_pool_pairs(pool_dir))


def _bad_case(case: str, pool_dir: Path, pool_id: str, tmp_path: Path) -> list:
    if case == "not-a-pool":
        return ["--status", tmp_path / "set"]
    if case == "export-of-another-pool":
        _write_csv(pool_dir / "judgments-0123456789abcdef-alice.csv", "alice", [("q2", "d00", 1)])
        return ["--status", pool_dir]
    if case == "judgments-of-another-pool":
        return ["--status", pool_dir, "--judgments", _write_csv(tmp_path / "other.csv", "x", [("q9", "x1", 1)])]
    return ["--status", pool_dir, "--depth", "3"]  # a pooling option, which --status would ignore


CASES = [
    ("not-a-pool", 1, r"set: not a pool folder \(no manifest.json\); give the folder that `beir-harness pool --out`"),
    (
        "export-of-another-pool",
        1,
        r"judgments-0123456789abcdef-alice.csv: exported from pool 0123456789abcdef, not "
        r"this pool \([0-9a-f]{16}\); judge this pool's judge.html",
    ),
    (
        "judgments-of-another-pool",
        1,
        r"other.csv: none of its 1 judgments is a pair of this pool \(is it the "
        r"judgments of another pool\?\)",
    ),
    ("pooling-option", 2, r"--depth: pooling options, not for --status POOL_DIR"),
]


@pytest.mark.parametrize(("case", "code", "message"), CASES, ids=[case for case, _, _ in CASES])
def test_bad_input_is_one_line(pool, tmp_path, case, code, message):
    _, pool_dir, pool_id = pool
    result = _invoke("pool", *_bad_case(case, pool_dir, pool_id, tmp_path))
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    error = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(error) == 1, result.stderr
    assert re.search(message, error[0]), error[0]


def test_the_api_gives_the_same_status(pool):
    from harness import pool_status

    _, pool_dir, _ = pool
    cli_json = json.loads(_invoke("pool", "--status", pool_dir, "--json").stdout)
    assert pool_status(pool_dir).to_json() == cli_json
