"""Every command through click's CliRunner: success, --help, and an error path."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import invoke

import harness.pipeline.evaluate
import harness.retrieval.encode
from harness.cli import cli
from harness.io.trec import read_run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_model(monkeypatch, fake_encoder):
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    return fake_encoder


@pytest.mark.parametrize("command", [[], ["demo"], ["evaluate"]])
def test_help(command):
    result = invoke([*command, "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output


def test_the_command_table_is_each_command_s_own_name_module_and_first_sentence():
    """The group lists its commands and their summaries from the table (its --help imports no command): each entry
    names the module and function that define the command, and its summary is the command's own short help."""
    import click

    from harness.cli.commands import COMMANDS

    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name, info in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is info.load() and command.name == name
        assert command.callback.__module__ == info.module, name
        assert info.summary == command.get_short_help_str(limit=10_000), name
    listed = invoke(["--help"], terminal_width=80).output
    rows = [row for row in listed[listed.index("\nCommands:\n") :].splitlines()[2:] if row.strip()]
    assert [row.split()[0] for row in rows] == sorted(COMMANDS)
    limit = 80 - 6 - max(map(len, COMMANDS))  # click's width for a group's summaries
    for row, name in zip(rows, sorted(COMMANDS)):
        assert row.split(None, 1)[1] == cli.get_command(ctx, name).get_short_help_str(limit), name


def test_dash_q_is_quiet_in_every_command():
    """-q is the global --quiet: no command declares a -q (or any short flag the group takes) of its own."""
    import click

    def commands(group, path=()):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            yield (*path, name), command
            if isinstance(command, click.Group):
                yield from commands(command, (*path, name))

    own = [
        f"{' '.join(path)}: {flag}"
        for path, command in commands(cli)
        for param in command.params
        for flag in (*param.opts, *param.secondary_opts)
        if flag in ("-q", "-v", "--quiet", "--verbose")
    ]
    assert not own, own


def test_demo_prints_the_lesson_table(default_encoder, monkeypatch):
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: default_encoder)
    result = invoke(["-q", "demo"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "q1     [0, 13]   [13, 2, 4]  0.50      1.00" in lines
    assert "q3     [14]      [8, 14, 7]  1.00      0.50" in lines
    assert any(line.startswith("mean Recall@3 0.80   MRR@10 0.90   nDCG@10 0.") for line in lines)


def test_demo_unknown_model_is_one_line():
    result = invoke(["demo", "--model", "/no/such/model"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("Error: cannot load model '/no/such/model'")
    assert "Traceback" not in result.output


def test_evaluate_prints_table_and_writes_results(tiny_beir, tmp_path, fake_model):
    out = tmp_path / "res"
    result = invoke(["-v", "evaluate", str(tiny_beir), "--k", "1,10", "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert "tiny [test] · fake-bow · 3 judged queries" in result.stdout
    assert "nDCG@10" in result.stdout and "MRR@10" in result.stdout
    assert "INFO" not in result.stdout  # logs go to stderr
    assert "wrote" in result.stderr
    assert (out / "tiny" / "fake-bow" / "test.json").is_file()
    assert (out / "tiny" / "fake-bow" / "test.run.trec").is_file()


def test_evaluate_json_to_stdout(tiny_beir, tmp_path, fake_model):
    result = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--json",
            "--output-dir",
            str(tmp_path),
            "--ignore-identical-ids",
            "--top-k",
            "4",
            "--k",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["config"]["ignore_identical_ids"] is True
    assert data["config"]["top_k"] == 4
    # --k 2 is stored with the standard cutoffs up to the depth (4)
    assert (
        list(data["metrics"])[:3] == ["nDCG@1", "nDCG@2", "nDCG@3"] and len(data["metrics"]) == 22
    )  # 7 families at 3 cutoffs, and R-Prec


def test_evaluate_external_run(tiny_beir, tmp_path):
    run_file = tmp_path / "r.trec"
    run_file.write_text("q1 Q0 d1 1 1.0 x\n")
    result = invoke(["evaluate", str(tiny_beir), "--run", str(run_file), "--k", "1", "--output-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert re.search(r"Recall@1 +0\.1667", result.stdout)  # q1 finds 1 of 2; q2, q3 score 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["evaluate", "{data}/missing"], "no such dataset folder"),
        (["evaluate", "{data}", "--split", "train"], "missing qrels/train.tsv"),
        (["evaluate", "{data}", "--k", "1,x"], "cutoff 'x'"),
        (["evaluate", "{data}", "--run", "{data}/corpus.jsonl"], "corpus.jsonl: not a run: one JSON object per line"),
        (["evaluate", "{data}", "--k", "10", "--top-k", "5"], "smaller than the largest cutoff"),
    ],
    ids=["missing-folder", "missing-split", "bad-cutoff", "not-a-run-file", "top-k-below-k"],
)
def test_evaluate_errors_are_one_line_and_write_nothing(tiny_beir, tmp_path, fake_model, args, message):
    out = tmp_path / "res"
    args = [a.replace("{data}", str(tiny_beir)) for a in args] + ["--output-dir", str(out)]
    result = invoke(args)
    assert result.exit_code != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_python_dash_m_help_from_repo_root():
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "evaluate" in proc.stdout and "demo" in proc.stdout


def test_console_script_version():
    proc = subprocess.run(["beir-harness", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "beir-harness" in proc.stdout


def test_quiet_demo_writes_nothing_to_stderr():
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    proc = subprocess.run(["beir-harness", "-q", "demo"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "mean Recall@3 0.80" in proc.stdout


def test_library_errors_name_settings_and_the_cli_shows_options(tiny_beir, tmp_path):
    from harness.errors import HarnessError
    from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

    with pytest.raises(HarnessError, match="`top_k` 5 is smaller than the largest cutoff 10; raise `top_k`"):
        evaluate_dataset(EvaluateConfig(tiny_beir, model="bm25", top_k=5, k_values=(10,), output_dir=None))
    result = invoke(
        ["evaluate", str(tiny_beir), "--model", "bm25", "--top-k", "5", "--k", "10", "--output-dir", str(tmp_path)]
    )
    assert result.exit_code == 1 and "--top-k 5 is smaller than the largest cutoff 10; raise --top-k" in result.stderr
    assert "`" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["evaluate", "x", "--k", "x"],
        ["report", "--metric", "nDGC@10"],
        ["bench", "--models", "bm25", "--datasets", "x", "--metric", "nDGC@10"],
        ["compare", "a.json"],
        ["evalute"],
        ["--bogus"],
        ["inspect", "a.json", "--worst", "0"],
    ],
)
def test_a_command_line_mistake_is_one_line_and_exit_2_in_every_command(args):
    result = invoke(args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "--help')" in lines[0]


def test_global_flags_work_anywhere_on_the_line(tiny_beir, tmp_path):
    quiet_after = invoke(["evaluate", str(tiny_beir), "--model", "bm25", "--output-dir", str(tmp_path), "-q"])
    assert quiet_after.exit_code == 0, quiet_after.output
    assert "INFO" not in quiet_after.stderr and "nDCG@10" in quiet_after.stdout
    assert (
        "INFO" not in invoke(["evaluate", str(tiny_beir), "--model", "bm25", "--output-dir", str(tmp_path)]).stderr
    )  # quiet by default
    verbose_after = invoke(["evaluate", str(tiny_beir), "--model", "bm25", "--output-dir", str(tmp_path), "-v"])
    assert verbose_after.exit_code == 0 and "INFO" in verbose_after.stderr


def test_runs_in_trec_msmarco_and_json_formats_score_the_same(tiny_beir, tmp_path):
    ranking = {"q1": ["d1", "d3", "d2"], "q2": ["d4", "d5"], "q3": ["d5"]}
    trec = "".join(f"{q} Q0 {d} {r} {10 - r} sys\n" for q, docs in ranking.items() for r, d in enumerate(docs, 1))
    msmarco = "".join(f"{q}\t{d}\t{r}\n" for q, docs in ranking.items() for r, d in enumerate(docs, 1))
    as_json = json.dumps({q: {d: 10.0 - r for r, d in enumerate(docs, 1)} for q, docs in ranking.items()})
    metrics = {}
    for name, text, fmt in (
        ("run.trec", trec, "trec"),
        ("run.tsv", msmarco, "msmarco"),
        ("run.json", as_json, "json"),
        ("run.txt", as_json, "json"),
    ):  # a JSON run without the extension: sniffed
        (tmp_path / name).write_text(text)
        result = invoke(
            [
                "evaluate",
                str(tiny_beir),
                "--run",
                str(tmp_path / name),
                "--json",
                "--output-dir",
                str(tmp_path / "out" / name),
            ],
        )
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["config"]["run_format"] == fmt
        metrics[name] = data["metrics"]
    assert metrics["run.trec"] == metrics["run.tsv"] == metrics["run.json"] == metrics["run.txt"]


def test_retrieve_writes_the_run_evaluate_would_score(tiny_beir, tmp_path):
    out = tmp_path / "bm25.trec"
    result = invoke(["retrieve", str(tiny_beir), "--model", "bm25", "--out", str(out), "--top-k", "3"])
    assert result.exit_code == 0, result.output
    scored = json.loads(
        invoke(
            [
                "evaluate",
                str(tiny_beir),
                "--run",
                str(out),
                "--k",
                "1,3",
                "--json",
                "--output-dir",
                str(tmp_path / "a"),
            ],
        ).stdout
    )
    direct = json.loads(
        invoke(
            [
                "evaluate",
                str(tiny_beir),
                "--model",
                "bm25",
                "--k",
                "1,3",
                "--top-k",
                "3",
                "--json",
                "--output-dir",
                str(tmp_path / "b"),
            ],
        ).stdout
    )
    assert {name: scored["metrics"][name] for name in direct["metrics"]} == direct["metrics"]
    # No judgments needed, and queries of one's own.
    shutil.rmtree(tiny_beir / "qrels")
    (tmp_path / "mine.jsonl").write_text('{"_id": "new1", "text": "zucchini"}\n')
    mine = tmp_path / "mine.trec"
    result = invoke(
        [
            "retrieve",
            str(tiny_beir),
            "--model",
            "hash:32",
            "--queries",
            str(tmp_path / "mine.jsonl"),
            "--out",
            str(mine),
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.output
    assert set(read_run(mine)) == {"new1"} and read_run(mine).name == "hash:32"


def test_settings_a_first_stage_ignores_are_named_and_not_recorded(tiny_beir, tmp_path):
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            "bm25",
            "--index",
            "hnsw",
            "--query-prefix",
            "q: ",
            "--json",
            "--output-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "BM25 does not use --index hnsw, --query-prefix: ignored, and not recorded in the result" in result.stderr
    data = json.loads(result.stdout)
    assert (
        "index" not in data["config"] and data["variant"] == "" and (tmp_path / "tiny" / "bm25" / "test.json").exists()
    )


@pytest.mark.parametrize("command", ["evaluate", "bench", "retrieve"])
def test_run_options_are_grouped_in_help(command):
    text = invoke([command, "--help"]).stdout
    positions = [text.index(f"\n{section}:\n") for section in ("Data", "Model", "Retrieval and index", "Engine")]
    assert positions == sorted(positions)
    options = text[text.index("\nData:\n") :]  # the description's examples come before
    assert options.index("--hnsw-m") > options.index("Retrieval and index:") > options.index("--precision")
    assert options.index("--ray-address") > options.index("\nEngine:\n")


def test_the_model_help_names_every_kind_and_examples_need_no_checkout():
    text = invoke(["evaluate", "--help"]).stdout
    for word in ("bm25", "SparseEncoder", "hash:DIM", "all-MiniLM-L6-v2", "--rerank"):
        assert word in " ".join(text.split())
    for name, command in cli.commands.items():
        assert "../shared" not in (command.help or ""), name


def _commands(group, path=()):
    import click

    for name, command in group.commands.items():
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def test_every_help_example_is_a_command_a_shell_can_take():
    # A `\` ending a docstring line joins it to the next (Python's line continuation), which printed an
    # example as `... e5-small-v2,             weights=0.3:0.7)`: each example line is checked as printed.
    import shlex

    for path in _commands(cli):
        output = invoke([*path, "--help"], terminal_width=200).output
        if "Example" not in output:
            continue
        examples = []
        for line in output.split("Example")[-1].splitlines()[1:]:
            if line and not line.startswith(" "):
                break  # the next section (Data:, Options:): the examples are over
            examples.append(line.strip())
        for line in filter(None, examples):
            if not line.startswith(("#", "(")):
                assert "     " not in line, f"{' '.join(path)} --help: {line}"
                shlex.split(line.rstrip("\\"))  # balanced quotes on every printed line
