"""Every command through click's CliRunner: success, --help, and an error path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import harness.retrieval.encode
import harness.pipeline.evaluate
from harness.cli import cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def fake_model(monkeypatch, fake_encoder):
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    return fake_encoder


@pytest.mark.parametrize("command", [[], ["demo"], ["evaluate"]])
def test_help(runner, command):
    result = runner.invoke(cli, [*command, "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output


def test_demo_prints_the_lesson_table(runner, default_encoder, monkeypatch):
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: default_encoder)
    result = runner.invoke(cli, ["-q", "demo"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "q1     [0, 13]   [13, 2, 4]  0.50      1.00" in lines
    assert "q3     [14]      [8, 14, 7]  1.00      0.50" in lines
    assert any(line.startswith("mean Recall@3 0.80   MRR@10 0.90   nDCG@10 0.") for line in lines)


def test_demo_unknown_model_is_one_line(runner):
    result = runner.invoke(cli, ["demo", "--model", "/no/such/model"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("Error: cannot load model '/no/such/model'")
    assert "Traceback" not in result.output


def test_evaluate_prints_table_and_writes_results(runner, tiny_beir, tmp_path, fake_model):
    out = tmp_path / "res"
    result = runner.invoke(cli, ["-v", "evaluate", str(tiny_beir), "--k", "1,10", "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert "tiny [test] · fake-bow · 3 judged queries" in result.stdout
    assert "nDCG@10" in result.stdout and "MRR@10" in result.stdout
    assert "INFO" not in result.stdout  # logs go to stderr
    assert "wrote" in result.stderr
    assert (out / "tiny" / "fake-bow" / "test.json").is_file()
    assert (out / "tiny" / "fake-bow" / "test.run.trec").is_file()


def test_evaluate_json_to_stdout(runner, tiny_beir, tmp_path, fake_model):
    result = runner.invoke(cli, ["-q", "evaluate", str(tiny_beir), "--json", "--output-dir", str(tmp_path),
                                 "--ignore-identical-ids", "--top-k", "4", "--k", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["config"]["ignore_identical_ids"] is True
    assert data["config"]["top_k"] == 4
    # --k 2 is stored with the standard cutoffs up to the depth (4)
    assert list(data["metrics"])[:3] == ["nDCG@1", "nDCG@2", "nDCG@3"] and len(data["metrics"]) == 22  # 7 families at 3 cutoffs, and R-Prec


def test_evaluate_external_run(runner, tiny_beir, tmp_path):
    run_file = tmp_path / "r.trec"
    run_file.write_text("q1 Q0 d1 1 1.0 x\n")
    result = runner.invoke(cli, ["evaluate", str(tiny_beir), "--run", str(run_file), "--k", "1",
                                 "--output-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert re.search(r"Recall@1 +0\.1667", result.stdout)  # q1 finds 1 of 2; q2, q3 score 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["evaluate", "{data}/missing"], "no such dataset folder"),
        (["evaluate", "{data}", "--split", "train"], "missing qrels/train.tsv"),
        (["evaluate", "{data}", "--k", "1,x"], "cutoff 'x'"),
        (["evaluate", "{data}", "--run", "{data}/corpus.jsonl"], "corpus.jsonl:1: expected 6 columns"),
        (["evaluate", "{data}", "--k", "10", "--top-k", "5"], "smaller than the largest cutoff"),
    ],
    ids=["missing-folder", "missing-split", "bad-cutoff", "not-a-run-file", "top-k-below-k"],
)
def test_evaluate_errors_are_one_line_and_write_nothing(runner, tiny_beir, tmp_path, fake_model, args, message):
    out = tmp_path / "res"
    args = [a.replace("{data}", str(tiny_beir)) for a in args] + ["--output-dir", str(out)]
    result = runner.invoke(cli, args)
    assert result.exit_code != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_python_dash_m_help_from_repo_root():
    proc = subprocess.run([sys.executable, "-m", "harness", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
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
    result = CliRunner().invoke(cli, ["evaluate", str(tiny_beir), "--model", "bm25", "--top-k", "5", "--k", "10",
                                      "--output-dir", str(tmp_path)])
    assert result.exit_code == 1 and "--top-k 5 is smaller than the largest cutoff 10; raise --top-k" in result.stderr
    assert "`" not in result.stderr


@pytest.mark.parametrize("args", [
    ["evaluate", "x", "--k", "x"], ["report", "--metric", "nDGC@10"], ["bench", "--models", "bm25", "--datasets", "x",
                                                                          "--metric", "nDGC@10"],
    ["compare", "a.json"], ["evalute"], ["--bogus"], ["inspect", "a.json", "--worst", "0"],
])
def test_a_command_line_mistake_is_one_line_and_exit_2_in_every_command(args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "--help')" in lines[0]


def test_global_flags_work_anywhere_on_the_line(tiny_beir, tmp_path):
    quiet_after = CliRunner().invoke(cli, ["evaluate", str(tiny_beir), "--model", "bm25", "--output-dir",
                                           str(tmp_path), "-q"])
    assert quiet_after.exit_code == 0, quiet_after.output
    assert "INFO" not in quiet_after.stderr and "nDCG@10" in quiet_after.stdout
    assert "INFO" not in CliRunner().invoke(cli, ["evaluate", str(tiny_beir), "--model", "bm25", "--output-dir",
                                                  str(tmp_path)]).stderr  # quiet by default
    verbose_after = CliRunner().invoke(cli, ["evaluate", str(tiny_beir), "--model", "bm25", "--output-dir",
                                             str(tmp_path), "-v"])
    assert verbose_after.exit_code == 0 and "INFO" in verbose_after.stderr
