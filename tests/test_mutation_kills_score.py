"""The counts `score` prints (mutation testing: docs/mutation-report.md).

Every count is made different from every other (judged queries, judgments, run queries, judged queries
without results, run queries nobody judged, the depth), so a count printed in another's place shows. The
expected counts come from loops over the files written here; the means from pytrec_eval.
"""

from __future__ import annotations

import json

import pytest
import pytrec_eval
from click.testing import CliRunner

from harness.cli import cli as main

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


def invoke(*args):
    result = CliRunner().invoke(main, ["score", *map(str, args)])
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
    lines = invoke(qrels, run, "-m", "MAP").splitlines()
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
    lines = invoke(qrels, run, "-m", "P@5", "--judged-only").splitlines()
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
        invoke(qrels, run, "-m", "MAP", "-m", "P@5", "--json", *(["--judged-only"] if judged_only else []))
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
    lines = invoke(qrels, run, "-m", "MAP", "-q", "--digits", "6").splitlines()
    values = [line.split("\t") for line in lines if not line.startswith("#")]
    assert [v[1] for v in values] == sorted(QRELS) + ["all"]
    assert all(v[0] == f"{'MAP':<22}" for v in values)
    for name, query, value in values:
        expected = _pytrec("map", sorted(QRELS) if query == "all" else [query])
        assert value == f"{expected:.6f}"


def test_the_json_document_names_both_files_and_what_was_counted(files):
    qrels, run = files
    document = json.loads(invoke(qrels, run, "-m", "MAP", "--json", "-q"))
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
    lines = invoke(qrels, run, "-m", "P@5").splitlines()
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
    result = CliRunner().invoke(main, ["score", "--help"])
    assert "[default: nDCG@10, MAP, MRR, Recall@100, P@10, R-Prec]" in " ".join(result.output.split())


def test_without_metrics_the_defaults_are_printed_in_order(files):
    qrels, run = files
    names = [line.split("\t")[0].strip() for line in invoke(qrels, run).splitlines() if not line.startswith("#")]
    assert names == ["nDCG@10", "MAP", "MRR", "Recall@100", "P@10", "R-Prec"]


def test_a_metric_spelled_twice_or_another_way_is_scored_once_in_its_canonical_name(files):
    qrels, run = files
    names = [
        line.split("\t")[0].strip()
        for line in invoke(qrels, run, "-m", "map", "-m", "MAP", "-m", "ndcg_cut_10").splitlines()
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
    out = invoke(qrels, run, "-m", "P@5", "--json", "-q")
    lines = out.splitlines()
    assert lines[0] == "{"
    assert lines[1] == f'  "qrels": "{qrels}",'  # the path as written, "é" and all
    assert '    "café": {' in lines and '    "東京": {' in lines
    assert '      "P@5": 0.2' in lines  # café: d1 of 5 is relevant, by hand
    assert "\\u" not in out
    document = json.loads(out)
    assert document["per_query"] == {"café": {"P@5": 0.2}, "東京": {"P@5": 0.0}}
