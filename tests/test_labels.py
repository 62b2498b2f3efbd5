"""Labels: every system has one readable, unique label, the same in every output, and bench takes LABEL=SYSTEM.

The expected labels are written out here by hand (what a reader should see); they are never built with the
harness's own label functions.
"""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from click.testing import CliRunner

import harness.retrieval.encode
from harness.cli import cli

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
FUSIONS = (
    f"rrf(bm25, {MINILM}), wsum(bm25, {MINILM}, weights=0.3:0.7, norm=zscore), "
    f"wsum(bm25, {MINILM}, weights=0.7:0.3), combsum(bm25, {MINILM}, norm=zscore)"
)
EXPECTED = [
    "bm25",
    "all-MiniLM-L6-v2",
    "rrf(bm25, all-MiniLM-L6-v2)",
    "wsum(bm25, all-MiniLM-L6-v2; 0.3:0.7, zscore)",
    "wsum(bm25, all-MiniLM-L6-v2; 0.7:0.3)",
    "combsum(bm25, all-MiniLM-L6-v2; zscore)",
]


def _balanced(text: str) -> bool:
    stack = []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in ")]}":
            if not stack or stack.pop() != {")": "(", "]": "[", "}": "{"}[char]:
                return False
    return not stack


@pytest.fixture
def fused_results(tiny_beir, tmp_path, monkeypatch, fake_encoder):
    """bm25, a dense model named as MiniLM (the fake encoder behind it) and four fusions of them, by bench."""
    fake_encoder.name = MINILM
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    out = tmp_path / "results"
    result = CliRunner().invoke(
        cli,
        [
            "-q",
            "bench",
            "--systems",
            f"bm25, {MINILM}, {FUSIONS}",
            "--datasets",
            str(tiny_beir),
            "--output-dir",
            str(out),
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.output
    return out


def _report(out, *options) -> str:
    result = CliRunner().invoke(cli, ["report", str(out), *options])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_fusions_keep_method_members_and_settings_in_every_format(fused_results, tmp_path, monkeypatch):
    markdown = _report(fused_results, "--format", "markdown").splitlines()[0]
    columns = [cell.strip() for cell in markdown.strip("|").split(" | ")][1:]
    assert sorted(columns) == sorted(EXPECTED)  # the same labels, in the same order, in every format below
    latex = next(
        line for line in _report(fused_results, "--format", "latex").splitlines() if line.startswith("dataset")
    )
    assert [cell.strip() for cell in latex.removesuffix(r"\\").split(" & ")][1:] == columns
    header = next(csv.reader(io.StringIO(_report(fused_results, "--format", "csv"))))
    assert header[1:] == columns
    assert json.loads(_report(fused_results, "--format", "json"))["columns"] == columns
    html = _report(fused_results, "--format", "html")
    data = json.loads(re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S).group(1))
    assert data["systems"] == columns and set(data["provenance"]) == set(columns)
    assert 'split("/")' not in html  # the page shows the labels as given, never cuts them itself
    # The plot's legend.
    import harness.reporting.comparison as comparison

    figures = []
    monkeypatch.setattr(comparison, "save_png", lambda fig, path: figures.append(fig))
    _report(fused_results, "--plot", str(tmp_path / "plot.png"))
    assert figures[0].axes[0].get_legend_handles_labels()[1] == columns
    assert all(_balanced(label) for label in EXPECTED)


def test_inspect_and_compare_show_the_same_labels(fused_results):
    fusion = sorted((fused_results / "tiny" / "fusion").glob("test.*.json"))
    wsums = [path for path in fusion if json.loads(path.read_text())["config"]["fusion"]["method"] == "wsum"]
    inspected = CliRunner().invoke(cli, ["inspect", *map(str, wsums), "--metric", "nDCG@5"])
    assert inspected.exit_code == 0, inspected.output
    assert "wsum(bm25, all-MiniLM-L6-v2; 0.3:0.7, zscore)" in inspected.stdout
    assert "wsum(bm25, all-MiniLM-L6-v2; 0.7:0.3)" in inspected.stdout
    assert all(_balanced(line) for line in inspected.stdout.splitlines())  # never a member cut off from its fusion
    compared = CliRunner().invoke(cli, ["compare", *map(str, wsums), "--rounds", "100"])
    assert compared.exit_code == 0, compared.output
    shown = [line.split("  (")[0][4:] for line in compared.stdout.splitlines()[:2]]  # "A = label  (file)"
    assert sorted(shown) == ["wsum(bm25, all-MiniLM-L6-v2; 0.3:0.7, zscore)", "wsum(bm25, all-MiniLM-L6-v2; 0.7:0.3)"]


def test_bench_takes_a_label_per_system(tiny_beir, tmp_path, monkeypatch, fake_encoder):
    fake_encoder.name = MINILM
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    out = tmp_path / "results"
    result = CliRunner().invoke(
        cli,
        [
            "-q",
            "bench",
            "--systems",
            f"lex=bm25, dense={MINILM}, hybrid=rrf(bm25, {MINILM})",
            "--datasets",
            str(tiny_beir),
            "--output-dir",
            str(out),
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split() == ["nDCG@10", "lex", "dense", "hybrid"]
    header = next(csv.reader(io.StringIO(_report(out, "--format", "csv"))))
    assert sorted(header[1:]) == ["dense", "hybrid", "lex"]
    assert {row["label"] for row in csv.DictReader(open(out / "results.csv"))} == {"lex", "dense", "hybrid"}


def test_fuse_takes_the_weights_as_bench_writes_them(tiny_beir, tmp_path):
    out = tmp_path / "results"
    for model in ("bm25", "hash:64"):
        assert (
            CliRunner()
            .invoke(cli, ["-q", "evaluate", str(tiny_beir), "--model", model, "--output-dir", str(out)])
            .exit_code
            == 0
        )
    inputs = [str(out / "tiny" / "bm25" / "test.json"), str(out / "tiny" / "hash_64" / "test.json")]
    labels = []
    for weights in ("0.3:0.7", "0.3,0.7"):  # bench's syntax, and the older comma form fuse still reads
        fused = CliRunner().invoke(
            cli,
            [
                "fuse",
                *inputs,
                "--method",
                "wsum",
                "--weights",
                weights,
                "--norm",
                "zscore",
                "--output-dir",
                str(out),
                "--json",
            ],
        )
        assert fused.exit_code == 0, fused.output
        data = json.loads(fused.stdout)
        assert data["config"]["fusion"]["weights"] == [0.3, 0.7]
        labels.append(data["label"])
    assert labels == ["wsum(bm25, hash:64; 0.3:0.7, zscore)"] * 2


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "systems, message",
    [
        ("=bm25", "no label before the '='"),
        ("a=b=c", "more than one '=' outside parentheses"),
        ("a=", "no system after the '='"),
        ("hybrid=rrf(bm25, x", "is never closed"),
        ("a)=bm25", "a ')' closes nothing"),
        ("a]=bm25", "a ']' closes nothing"),
    ],
    ids=["empty-label", "two-equals", "empty-system", "unclosed-parenthesis", "stray-parenthesis", "stray-bracket"],
)
def test_a_bad_label_syntax_is_one_line_and_writes_nothing(tmp_path, systems, message):
    out = tmp_path / "results"
    result = CliRunner().invoke(cli, ["bench", "--systems", systems, "--datasets", "tiny", "--output-dir", str(out)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()


def test_two_systems_with_one_label_are_refused_naming_both(tmp_path):
    out = tmp_path / "results"
    result = CliRunner().invoke(
        cli, ["bench", "--systems", "a=bm25, a=hash:64", "--datasets", "tiny", "--output-dir", str(out)]
    )
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "'bm25' and 'hash:64' are both labelled 'a'" in result.stderr
    assert '--systems "a=bm25, b=hash:64"' in result.stderr
    assert not out.exists()
    taken = CliRunner().invoke(
        cli, ["bench", "--systems", "bm25=hash:64, bm25", "--datasets", "tiny", "--output-dir", str(out)]
    )  # a label that is another system's name
    assert taken.exit_code == 2 and "both labelled 'bm25'" in taken.stderr and not out.exists()


def test_one_label_on_two_results_of_a_table_is_noted_naming_both(tiny_beir, tmp_path):
    out = tmp_path / "results"
    for model in ("bm25", "hash:64"):
        assert (
            CliRunner()
            .invoke(
                cli, ["-q", "evaluate", str(tiny_beir), "--model", model, "--name", "mine", "--output-dir", str(out)]
            )
            .exit_code
            == 0
        )
    report = CliRunner().invoke(cli, ["report", str(out)])
    assert report.exit_code == 0, report.output
    note = next(line for line in report.stdout.splitlines() if "labelled 'mine'" in line)
    assert "bm25/test.json" in note and "hash_64/test.json" in note and '--systems "a=SYSTEM, b=SYSTEM"' in note
    header = report.stdout.splitlines()[0]
    assert len({cell.strip() for cell in header.strip("|").split(" | ")[1:]}) == 2  # two columns, told apart


def test_weights_written_with_commas_in_a_bench_fusion_say_the_syntax(tmp_path):
    out = tmp_path / "results"
    result = CliRunner().invoke(
        cli,
        ["bench", "--systems", "wsum(bm25, hash:64, weights=0.3, 0.7)", "--datasets", "tiny", "--output-dir", str(out)],
    )
    assert result.exit_code == 1 and "separate weights with ':', e.g. weights=0.3:0.7" in result.stderr, result.output
    assert not out.exists()


@pytest.mark.parametrize("name", ["rrf(bm25", "x]", " "])
def test_fuse_refuses_a_name_with_an_unbalanced_bracket(tmp_path, name):
    result = CliRunner().invoke(cli, ["fuse", "a.json", "b.json", "--name", name, "--output-dir", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--name" in result.stderr, result.output
    assert not (tmp_path / "o").exists()


def _result(model: str, label: str, dataset: str = "d", config: dict | None = None, config_hash: str = ""):
    from harness.reporting.report import Result

    return Result(
        dataset,
        "test",
        model,
        {"nDCG@10": 0.5},
        {},
        1,
        config or {},
        {},
        {},
        {},
        "",
        label=label,
        config_hash=config_hash or model,
    )


def test_model_names_that_would_show_alike_keep_their_full_labels():
    from harness.reporting.labels import column_labels

    results = [
        _result("BAAI/bge-small", "BAAI/bge-small"),
        _result("me/bge-small", "me/bge-small"),
        _result("intfloat/e5", "intfloat/e5 [dim128 binary]"),
        _result("bm25", "bm25 >> ms-marco-MiniLM@100"),
        # A fusion written before members' models were recorded: its members' labels name them.
        _result("fusion", "rrf(bm25, intfloat/e5)", config={"inputs": [{"label": "bm25"}, {"label": "intfloat/e5"}]}),
    ]
    kept, labels = column_labels(results, [])
    assert [labels[id(r)] for r in kept] == [
        "BAAI/bge-small",
        "me/bge-small",
        "e5 [dim128 binary]",
        "bm25 >> ms-marco-MiniLM@100",
        "rrf(bm25, e5)",
    ]
