"""`beir-harness score QRELS RUN` and `harness.score` on files, checked against trec_eval's own test files.

The expected values are what trec_eval itself printed (tests/data/trec_eval/out.*, see SOURCE.md there),
four decimals, as trec_eval prints them: nothing here is computed by the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import pytrec_eval
from cli_runner import invoke

from harness import score
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
    args = ["score", str(TREC_EVAL / qrels), str(TREC_EVAL / run), "--per-query"] + [f"-m{m}" for m in measures]
    result = invoke(args)
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
    result = invoke(
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
    default = invoke(["score", str(TREC_EVAL / "qrels.test"), str(TREC_EVAL / "results.trunc"), "-m", "map"])
    assert "# queries: every judged query, 3 (as trec_eval -c); 1 without results in the run score 0" in default.stdout
    assert _our_output(default.stdout)[("MAP", "all")] == theirs[("map", "all")]


def test_uncut_metrics_say_the_depth_they_read(tmp_path):
    result = invoke(
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


def test_score_per_query_is_its_long_flag_and_dash_q_is_the_global_quiet():
    args = [str(TREC_EVAL / "qrels.test"), str(TREC_EVAL / "results.test"), "-m", "map"]
    per_query = invoke(["score", *args, "--per-query"])
    assert [line.split("\t")[1] for line in per_query.stdout.splitlines() if not line.startswith("#")] == [
        "301",
        "302",
        "303",
        "all",
    ]
    # -q means --quiet in score as in every command: before or after the command, the means alone.
    for quiet in (["-q", "score", *args], ["score", *args, "--quiet"], ["score", *args, "-q"]):
        result = invoke(quiet)
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
    result = invoke(["score", str(qrels), str(run), *extra])
    assert result.exit_code == code
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""


def test_a_metric_without_its_cutoff_is_refused_where_results_are_read(tmp_path):
    """Result files store MAP, nDCG, MRR at cutoffs: `report --metric map` says so instead of finding nothing."""
    result = invoke(["report", str(tmp_path), "--metric", "map"])
    assert result.exit_code == 2
    assert (
        "metric 'map' has no cutoff, and results store MAP at cutoffs: write e.g. MAP@10 (beir-harness score "
        "computes MAP over a whole run)"
    ) in result.stderr


# The counts `score` prints.
#
# Every count is made different from every other (judged queries, judgments, run queries, judged queries
# without results, run queries nobody judged, the depth), so a count printed in another's place shows. The
# expected counts come from loops over the files written here; the means from pytrec_eval.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


# 6 judged queries (q1..q6), 11 judgments; the run has q1..q4 (judged) and u1..u3 (nobody judged): 7 queries,
# 2 judged without results (q5, q6), 3 unjudged; the deepest counted list is q2's 9 documents.
QRELS = {
    "q1": {"d1": 1, "d2": 0},
    "q2": {"d3": 2, "d4": 1, "d5": 0},
    "q3": {"d6": 1},
    "q4": {"d7": 1, "d8": 3},
    "q5": {"d9": 1},
    "q6": {"d10": 1, "d1": 2},
}
RUN = {
    "q1": {"d1": 3.0, "d9": 2.0, "d2": 1.0},
    "q2": {f"x{i}": 10.0 - i for i in range(8)} | {"d4": 1.5},
    "q3": {"d6": 1.0, "d1": 0.5},
    "q4": {"d8": 2.0},
    "u1": {"d1": 1.0},
    "u2": {"d2": 1.0, "d3": 0.5},
    "u3": {f"y{i}": 1.0 / (i + 1) for i in range(12)},
}


@pytest.fixture
def files(tmp_path):
    qrels = tmp_path / "qrels.trec"
    qrels.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items()))
    run = tmp_path / "run.trec"
    lines = []
    for q, docs in RUN.items():
        for rank, (d, s) in enumerate(sorted(docs.items(), key=lambda x: -x[1]), 1):
            lines.append(f"{q} Q0 {d} {rank} {s} mytag\n")
    run.write_text("".join(lines))
    return qrels, run


def by_hand():
    judged = set(QRELS)
    in_run = set(RUN)
    return {
        "judged_queries": len(judged),
        "judgments": sum(len(d) for d in QRELS.values()),
        "run_queries": len(in_run),
        "missing": len(judged - in_run),
        "unjudged": len(in_run - judged),
        "with_results": len(judged & in_run),
        "depth": max(len(RUN[q]) for q in judged & in_run),
    }


def score_output(*args):
    result = invoke(["score", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_hand_counts_are_all_different():
    counts = by_hand()
    assert counts == {
        "judged_queries": 6,
        "judgments": 11,
        "run_queries": 7,
        "missing": 2,
        "unjudged": 3,
        "with_results": 4,
        "depth": 9,
    }
    del counts["missing"]  # = judged without results left out under --judged-only, by definition
    assert len(set(counts.values())) == len(counts)


def test_the_header_counts_each_file(files):
    qrels, run = files
    c = by_hand()
    lines = score_output(qrels, run, "-m", "MAP").splitlines()
    assert lines[0] == (
        f"# qrels {qrels} (TREC qrels: {c['judged_queries']} queries, {c['judgments']} judgments); "
        f"run {run} (TREC run 'mytag': {c['run_queries']} queries)"
    )
    assert lines[1] == (
        f"# queries: every judged query, {c['judged_queries']} (as trec_eval -c); {c['missing']} "
        f"without results in the run score 0; {c['unjudged']} run queries nobody judged are ignored"
    )
    assert lines[2] == (
        f"# MAP: no cutoff, over the whole run as retrieved, up to {c['depth']} documents a query (as trec_eval's map)"
    )


def test_judged_only_counts_the_judged_queries_with_results(files):
    qrels, run = files
    c = by_hand()
    lines = score_output(qrels, run, "-m", "P@5", "--judged-only").splitlines()
    assert lines[1] == (
        f"# queries: {c['with_results']} of {c['judged_queries']} judged queries, those the run has "
        f"results for (--judged-only, as trec_eval without -c); "
        f"{c['judged_queries'] - c['with_results']} judged without results left out"
    )
    assert not lines[2].startswith("# ")  # a cutoff metric reads no whole run: no depth line


def _pytrec(measure, queries):
    evaluator = pytrec_eval.RelevanceEvaluator(QRELS, {measure})
    per_query = evaluator.evaluate({q: RUN[q] for q in RUN if q in QRELS})
    return sum(per_query.get(q, {}).get(measure, 0.0) for q in queries) / len(queries)


@pytest.mark.parametrize("judged_only", [False, True])
def test_the_json_counts_and_means(files, judged_only):
    qrels, run = files
    c = by_hand()
    document = json.loads(
        score_output(qrels, run, "-m", "MAP", "-m", "P@5", "--json", *(["--judged-only"] if judged_only else []))
    )
    counted = sorted(set(QRELS) & set(RUN)) if judged_only else sorted(QRELS)
    assert document["n_queries"] == len(counted)
    assert document["n_missing"] == (0 if judged_only else c["missing"])
    assert document["n_unjudged"] == c["unjudged"]
    assert document["depth"] == c["depth"]
    assert document["judged_only"] is judged_only
    assert document["run_name"] == "mytag" and document["run_format"] == "trec" and document["qrels_format"] == "trec"
    assert document["metrics"] == ["MAP", "P@5"]
    assert document["means"]["MAP"] == pytest.approx(_pytrec("map", counted))
    assert document["means"]["P@5"] == pytest.approx(_pytrec("P_5", counted))
    assert "per_query" not in document


def test_the_printed_means_and_per_query_values(files):
    qrels, run = files
    lines = score_output(qrels, run, "-m", "MAP", "--per-query", "--digits", "6").splitlines()
    values = [line.split("\t") for line in lines if not line.startswith("#")]
    assert [v[1] for v in values] == sorted(QRELS) + ["all"]
    assert all(v[0] == f"{'MAP':<22}" for v in values)
    for name, query, value in values:
        expected = _pytrec("map", sorted(QRELS) if query == "all" else [query])
        assert value == f"{expected:.6f}"


def test_the_json_document_names_both_files_and_what_was_counted(files):
    qrels, run = files
    document = json.loads(score_output(qrels, run, "-m", "MAP", "--json", "--per-query"))
    c = by_hand()
    assert set(document) == {
        "qrels",
        "qrels_format",
        "run",
        "run_format",
        "run_name",
        "queries",
        "judged_only",
        "n_queries",
        "n_missing",
        "n_unjudged",
        "depth",
        "metrics",
        "means",
        "per_query",
    }
    assert (document["qrels"], document["run"]) == (str(qrels), str(run))
    assert document["queries"] == (
        f"every judged query, {c['judged_queries']} (as trec_eval -c); {c['missing']} "
        f"without results in the run score 0; {c['unjudged']} run queries nobody judged "
        "are ignored"
    )
    assert sorted(document["per_query"]) == sorted(QRELS)
    assert document["per_query"]["q1"]["MAP"] == pytest.approx(_pytrec("map", ["q1"]))


@pytest.mark.parametrize(
    "qrels_text, qrels_name, qrels_kind, run_text, run_name, run_kind, tag",
    [
        (
            "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td3\t1\n",
            "q.tsv",
            "BEIR",
            '{"q1": {"d1": 1.0, "d3": 0.5}, "u": {"d2": 1.0}}',
            "r.json",
            "JSON",
            "r",
        ),
        (
            '{"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 1}}',
            "q.json",
            "JSON",
            "q1\td1\t1\nq1\td3\t2\nu\td2\t1\n",
            "r.tsv",
            "MS MARCO",
            "r.tsv",
        ),
    ],
)
def test_each_format_is_named_with_its_counts(
    tmp_path, qrels_text, qrels_name, qrels_kind, run_text, run_name, run_kind, tag
):
    qrels, run = tmp_path / qrels_name, tmp_path / run_name
    qrels.write_text(qrels_text)
    run.write_text(run_text)
    lines = score_output(qrels, run, "-m", "P@5").splitlines()
    assert lines[0] == (
        f"# qrels {qrels} ({qrels_kind} qrels: 2 queries, 3 judgments); run {run} ({run_kind} run {tag!r}: 2 queries)"
    )
    assert lines[1] == (
        "# queries: every judged query, 2 (as trec_eval -c); 1 without results in the run score 0; "
        "1 run queries nobody judged are ignored"
    )


def test_the_default_metrics_and_a_bad_one():
    from harness.cli.scoring import DEFAULT_SCORE_METRICS

    assert DEFAULT_SCORE_METRICS == ("nDCG@10", "MAP", "MRR", "Recall@100", "P@10", "R-Prec")
    result = invoke(["score", "--help"])
    assert "[default: nDCG@10, MAP, MRR, Recall@100, P@10, R-Prec]" in " ".join(result.output.split())


def test_without_metrics_the_defaults_are_printed_in_order(files):
    qrels, run = files
    names = [line.split("\t")[0].strip() for line in score_output(qrels, run).splitlines() if not line.startswith("#")]
    assert names == ["nDCG@10", "MAP", "MRR", "Recall@100", "P@10", "R-Prec"]


def test_a_metric_spelled_twice_or_another_way_is_scored_once_in_its_canonical_name(files):
    qrels, run = files
    names = [
        line.split("\t")[0].strip()
        for line in score_output(qrels, run, "-m", "map", "-m", "MAP", "-m", "ndcg_cut_10").splitlines()
        if not line.startswith("#")
    ]
    assert names == ["MAP", "nDCG@10"]


def test_the_json_keeps_non_ascii_ids_readable_and_is_indented_by_two(tmp_path):
    # query ids and file names in other scripts are printed as themselves (UTF-8), not as \u escapes: a user
    # greps the document for the id they know; the document is indented by two spaces a level
    folder = tmp_path / "résultats"
    folder.mkdir()
    qrels, run = folder / "qrels.trec", folder / "run.trec"
    qrels.write_text("café 0 d1 1\n東京 0 d2 1\n", encoding="utf-8")
    run.write_text("café Q0 d1 1 2.0 t\n東京 Q0 d3 1 1.0 t\n", encoding="utf-8")
    out = score_output(qrels, run, "-m", "P@5", "--json", "--per-query")
    lines = out.splitlines()
    assert lines[0] == "{"
    assert lines[1] == f'  "qrels": "{qrels}",'  # the path as written, "é" and all
    assert '    "café": {' in lines and '    "東京": {' in lines
    assert '      "P@5": 0.2' in lines  # café: d1 of 5 is relevant, by hand
    assert "\\u" not in out
    document = json.loads(out)
    assert document["per_query"] == {"café": {"P@5": 0.2}, "東京": {"P@5": 0.0}}
