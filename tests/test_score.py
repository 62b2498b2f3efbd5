"""`beir-harness score QRELS RUN` and `harness.score` on files, checked against trec_eval's own test files.

The expected values are what trec_eval itself printed (tests/data/trec_eval/out.*, see SOURCE.md there),
four decimals, as trec_eval prints them: nothing here is computed by the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness import score
from harness.cli import cli
from harness.io.trec import read_qrels

TREC_EVAL = Path(__file__).parent / "data" / "trec_eval"
# trec_eval's measure names → ours (the canonical names `score` prints).
OURS = {
    "map": "MAP",
    "ndcg": "nDCG",
    "recip_rank": "MRR",
    "Rprec": "R-Prec",
    "P_10": "P@10",
    "ndcg_cut_10": "nDCG@10",
    "map_cut_100": "MAP@100",
    "recall_100": "Recall@100",
    "success_5": "Success@5",
    "ndcg_cut_1000": "nDCG@1000",
}
BINARY = ["map", "recip_rank", "Rprec", "P_10", "map_cut_100", "recall_100", "success_5"]


def _trec_eval_output(name: str) -> dict[tuple[str, str], str]:
    """(measure, query or 'all') → the value as trec_eval printed it."""
    values = {}
    for line in (TREC_EVAL / name).read_text().splitlines():
        measure, query_id, value = line.split("\t")
        values[(measure.strip(), query_id)] = value
    return values


def _our_output(stdout: str) -> dict[tuple[str, str], str]:
    lines = [line.split("\t") for line in stdout.splitlines() if not line.startswith("#")]
    return {(name.strip(), query_id): value for name, query_id, value in lines}


@pytest.mark.parametrize(
    ("qrels", "run", "expected", "measures"),
    [
        ("qrels.test", "results.test", "out.test.aq", ["ndcg", *BINARY, "ndcg_cut_10"]),
        # results.trunc lacks query 302 (scored 0: trec_eval -c, our default) and has words after the run tag.
        ("qrels.test", "results.trunc", "out.test.aqc", ["ndcg", *BINARY, "ndcg_cut_10"]),
        # Graded qrels (-1 to 4); trec_eval ran with -l2, which moves the binary measures but not ndcg's gains.
        ("qrels.rel_level", "results.test", "out.test.aql", ["ndcg", "ndcg_cut_10", "ndcg_cut_1000"]),
    ],
    ids=["qrels.test-results.test", "results.trunc-missing-query-and-trailing-words", "graded-rel_level"],
)
def test_score_prints_trec_eval_s_values_on_its_own_test_files(qrels, run, expected, measures):
    args = ["score", str(TREC_EVAL / qrels), str(TREC_EVAL / run), "-q"] + [f"-m{m}" for m in measures]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    ours, theirs = _our_output(result.stdout), _trec_eval_output(expected)
    assert f"TREC run '{theirs[('runid', 'all')]}'" in result.stdout  # the sixth column, words after it ignored
    query_ids = sorted({q for _, q in theirs if q != "all"})
    assert len(query_ids) == 3 and {q for _, q in ours} == {*query_ids, "all"}
    for measure in measures:
        for query_id in [*query_ids, "all"]:
            # trec_eval -c prints no line for the query the run lacks: it scores 0 there.
            assert ours[(OURS[measure], query_id)] == theirs.get((measure, query_id), "0.0000"), (measure, query_id)


def test_judged_only_averages_over_the_queries_the_run_has():
    """trec_eval without -c: the mean over the judged queries in the run (301 and 303), from trec_eval's own
    per-query values."""
    theirs = _trec_eval_output("out.test.aqc")
    result = CliRunner().invoke(
        cli,
        [
            "score",
            str(TREC_EVAL / "qrels.test"),
            str(TREC_EVAL / "results.trunc"),
            "--judged-only",
            "--json",
            "-m",
            "map",
            "-m",
            "ndcg",
            "-m",
            "Rprec",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["judged_only"] and document["n_queries"] == 2 and "without -c" in document["queries"]
    for measure in ("map", "ndcg", "Rprec"):
        expected = (float(theirs[(measure, "301")]) + float(theirs[(measure, "303")])) / 2
        assert math.isclose(document["means"][OURS[measure]], expected, abs_tol=1e-4), measure
    default = CliRunner().invoke(
        cli, ["score", str(TREC_EVAL / "qrels.test"), str(TREC_EVAL / "results.trunc"), "-m", "map"]
    )
    assert "# queries: every judged query, 3 (as trec_eval -c); 1 without results in the run score 0" in default.stdout
    assert _our_output(default.stdout)[("MAP", "all")] == theirs[("map", "all")]


def test_uncut_metrics_say_the_depth_they_read(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "score",
            str(TREC_EVAL / "qrels.test"),
            str(TREC_EVAL / "results.test"),
            "-m",
            "AP",
            "-m",
            "RR",
            "-m",
            "nDCG@10",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        "# MAP, MRR: no cutoff, over the whole run as retrieved, up to 500 documents a query (as trec_eval's "
        "map, recip_rank)"
    ) in result.stdout
    # A query retrieved 3,000 deep, its one relevant document at rank 2,501: the whole run is read.
    run = tmp_path / "deep.trec"
    run.write_text("".join(f"q Q0 d{i} {i + 1} {5000 - i} deep\n" for i in range(3000)) + "q2 Q0 d1 1 1 deep\n")
    qrels = tmp_path / "deep.qrels"
    qrels.write_text("q 0 d2500 1\nq2 0 d7 1\n")
    evaluation = score(qrels, run, ["recip_rank", "map", "MRR@1000"])
    assert evaluation.per_query["q"]["MRR"] == evaluation.per_query["q"]["MAP"] == 1 / 2501
    assert evaluation.per_query["q"]["MRR@1000"] == 0
    assert evaluation.depth == 3000  # the deepest query's, not q2's one document


def test_the_same_judgments_as_trec_beir_and_json_give_the_same_scores(tmp_path):
    """read_qrels tells the three formats apart by content; harness.score takes any of them, and a JSON run."""
    judgments = {}
    for line in (TREC_EVAL / "qrels.test").read_text().splitlines():  # read by hand, not by the code under test
        query_id, _, doc_id, grade = line.split()
        judgments.setdefault(query_id, {})[doc_id] = int(grade)
    beir = tmp_path / "qrels.tsv"
    beir.write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{g}\n" for q, docs in judgments.items() for d, g in docs.items())
    )
    as_json = tmp_path / "qrels"  # no .json name: sniffed from the content
    as_json.write_text(json.dumps(judgments))
    run = {}
    for line in (TREC_EVAL / "results.test").read_text().splitlines():
        query_id, _, doc_id, _, value, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(value)
    json_run = tmp_path / "run.json"
    json_run.write_text(json.dumps(run))
    theirs = _trec_eval_output("out.test.aq")
    for qrels in (TREC_EVAL / "qrels.test", beir, as_json):
        assert read_qrels(qrels).to_dict() == judgments
        for ranked in (TREC_EVAL / "results.test", json_run):
            means = score(qrels, ranked, ["map", "recip_rank", "ndcg", "Rprec"]).means
            assert {name: f"{value:.4f}" for name, value in means.items()} == {
                OURS[m]: theirs[(m, "all")] for m in ("map", "recip_rank", "ndcg", "Rprec")
            }


def test_trec_qrels_and_runs_skip_comment_lines_as_trec_eval_does(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("# judged by hand\nq1 0 d1 1\n  # indented\nq1 0 d2 0\n")
    run = tmp_path / "run.trec"
    run.write_text("# my run\nq1 Q0 d2 1 2.0 mine\nq1 Q0 d1 2 1.0 mine and words after the tag\n")
    assert read_qrels(qrels).to_dict() == {"q1": {"d1": 1, "d2": 0}}
    assert score(qrels, run, ["RR"]).means == {"MRR": 0.5}


def test_score_dash_q_is_per_query_and_the_global_quiet_still_works():
    args = [str(TREC_EVAL / "qrels.test"), str(TREC_EVAL / "results.test"), "-m", "map"]
    per_query = CliRunner().invoke(cli, ["score", *args, "-q"])
    assert [line.split("\t")[1] for line in per_query.stdout.splitlines() if not line.startswith("#")] == [
        "301",
        "302",
        "303",
        "all",
    ]
    for quiet in (["-q", "score", *args], ["score", *args, "--quiet"]):
        result = CliRunner().invoke(cli, quiet)
        assert result.exit_code == 0, result.output
        assert [line for line in result.stdout.splitlines() if not line.startswith("#")] == [
            "MAP                   \tall\t0.1785"
        ]


@pytest.mark.parametrize(
    ("qrels_text", "run_text", "extra", "code", "message"),
    [
        ("q1 0 d1 1\nq1 0 d2\n", None, [], 1, "qrels.txt:2: expected 4 columns (TREC qrels), found 3"),
        ("q1 0 d1 1 extra\n", None, [], 1, "qrels.txt:1: expected 4 columns (TREC qrels), found 5"),
        ("q1 0 d1 1.5\n", None, [], 1, "qrels.txt:1: grade '1.5' is not an integer (relevance grades are integers"),
        ('{"q1": {"d1": 0.5}}', None, [], 1, "grade 0.5 of 'q1'/'d1' is not an integer"),
        (
            None,
            "q1 Q0 d1 1 2.0 mine\nq1 Q0 d2 2 1.0\n",
            [],
            1,
            "run.trec:2: the run tag (sixth column) is missing: found 5 columns",
        ),
        (None, None, ["-m", "nDCG@1k"], 2, "metric 'nDCG@1k': cutoff '1k' is not a positive integer (e.g. nDCG@10)"),
        (None, None, ["-m", "nDGC@10"], 2, "unknown metric 'nDGC@10'; did you mean nDCG@10?"),
        (None, None, ["-m", "P"], 2, "metric 'P' needs a cutoff, e.g. P@10"),
        ("1 0 d1 1\n", None, [], 1, "run.trec: none of the run's 1 query ids has results judged in"),
    ],
    ids=[
        "trec-qrels-3-columns",
        "trec-qrels-5-columns",
        "non-integer-grade",
        "json-qrels-float-grade",
        "run-tag-missing",
        "metric-unknown-cutoff",
        "metric-unknown-name",
        "metric-without-its-cutoff",
        "no-shared-query",
    ],
)
def test_bad_input_is_one_line_and_prints_no_scores(tmp_path, qrels_text, run_text, extra, code, message):
    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.trec"
    qrels.write_text(qrels_text or "q1 0 d1 1\n")
    run.write_text(run_text or "q1 Q0 d1 1 2.0 mine\n")
    result = CliRunner().invoke(cli, ["score", str(qrels), str(run), *extra])
    assert result.exit_code == code
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""


def test_a_metric_without_its_cutoff_is_refused_where_results_are_read(tmp_path):
    """Result files store MAP, nDCG, MRR at cutoffs: `report --metric map` says so instead of finding nothing."""
    result = CliRunner().invoke(cli, ["report", str(tmp_path), "--metric", "map"])
    assert result.exit_code == 2
    assert (
        "metric 'map' has no cutoff, and results store MAP at cutoffs: write e.g. MAP@10 (beir-harness score "
        "computes MAP over a whole run)"
    ) in result.stderr
