"""Property tests: any input to a parser either parses or raises a HarnessError — never another
exception, never a hang (the BEIR/TREC readers are fuzzed in test_formats.py)."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.datasets.convert import ConvertOptions, convert_eval_set, convert_tables
from harness.errors import HarnessError
from harness.evaluation.metrics import parse_k_values, parse_metric

GOOD = {"queries.csv": b"id,text\nq1,hello\n", "qrels.csv": b"qid,docid,score\nq1,d1,1\n"}
counter = itertools.count()

# Bytes that look like the formats (so the fuzzer gets past the first byte) mixed with noise.
table_bytes = st.one_of(
    st.binary(max_size=300),
    st.lists(
        st.sampled_from(
            [
                b"id",
                b"text",
                b"title",
                b",",
                b"\t",
                b"\n",
                b"\r\n",
                b'"',
                b"d1",
                b"\xff",
                b"{",
                b"}",
                b"[",
                b"]",
                b":",
                b'"_id"',
                b'"text"',
                b"null",
                b"1.5",
                b"-1",
                b" ",
            ]
        ),
        max_size=40,
    ).map(b"".join),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=table_bytes, suffix=st.sampled_from([".csv", ".tsv", ".jsonl", ".json", ".csv.gz"]))
def test_convert_inputs_parse_or_raise_harness_error(tmp_path, data, suffix):
    folder = tmp_path / f"case{next(counter)}"
    folder.mkdir()
    for name, content in GOOD.items():
        (folder / name).write_bytes(content)
    corpus = folder / f"docs{suffix}"
    corpus.write_bytes(data)
    try:
        convert_tables(corpus, folder / "queries.csv", folder / "qrels.csv", folder / "out", ConvertOptions())
    except HarnessError:
        assert not (folder / "out").exists()
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []


eval_set_bytes = st.one_of(
    st.binary(max_size=300),
    st.lists(
        st.sampled_from(
            [
                b"{",
                b"}",
                b"[",
                b"]",
                b":",
                b",",
                b'"documents"',
                b'"queries"',
                b'"text"',
                b'"relevant"',
                b'"id"',
                b'"a"',
                b"0",
                b"1",
                b"-1",
                b"2.5",
                b"null",
                b"true",
                b"\n",
                b"- ",
                b"documents: ",
                b"queries: ",
            ]
        ),
        max_size=40,
    ).map(b"".join),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=eval_set_bytes, suffix=st.sampled_from([".json", ".yaml"]))
def test_eval_set_parses_or_raises_harness_error(tmp_path, data, suffix):
    folder = tmp_path / f"case{next(counter)}"
    folder.mkdir()
    path = folder / f"eval{suffix}"
    path.write_bytes(data)
    try:
        convert_eval_set(path, folder / "out")
    except HarnessError:
        assert not (folder / "out").exists()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_metric_names_and_cutoffs_parse_or_raise_harness_error(text):
    for parse in (parse_metric, parse_k_values):
        try:
            parse(text)
        except HarnessError:
            pass


SEEDS = [
    b"",
    b"\xff\xfe",
    b'{"_id": "d1", "text": "x"}\n',
    b"id,text\nd1,hello\n",
    b"query-id\tcorpus-id\tscore\n",
    b"q1 Q0 d1 1 0.5 run\n",
    b'{"documents": ["a"], "queries": [{"text": "a", "relevant": [0]}]}',
    b"nDCG@10",
]


def test_the_atheris_harness_runs_every_target_on_seeds():
    from fuzz_atheris import TARGETS

    assert set(TARGETS) == {
        "corpus",
        "queries",
        "qrels",
        "run",
        "csv",
        "tsv",
        "jsonl",
        "json",
        "eval-json",
        "eval-yaml",
        "metric",
    }
    for target in TARGETS.values():
        for seed in SEEDS:
            target(seed)


def test_the_atheris_harness_fuzzes_briefly_when_atheris_is_installed(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    pytest.importorskip("atheris")
    script = Path(__file__).with_name("fuzz_atheris.py")
    for name in ("corpus", "qrels", "csv", "eval-json"):
        # a crash's input goes to the test's folder, not the repository (the message shows it in base64)
        proc = subprocess.run(
            [sys.executable, str(script), name, "-atheris_runs=300", "-timeout=10", f"-artifact_prefix={tmp_path}/"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
