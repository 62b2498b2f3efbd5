"""Heavy libraries load lazily: --help and importing the CLI must not pull them in."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "faiss", "sentence_transformers", "pandas", "transformers", "pytrec_eval", "numpy")


def test_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from harness.cli import cli\n"
        "r = CliRunner().invoke(cli, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "for sub in (['demo', '--help'], ['evaluate', '--help']):\n"
        "    assert CliRunner().invoke(cli, sub).exit_code == 0\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_datasets_folder_cannot_shadow_hugging_face_datasets():
    root = Path(__file__).resolve().parents[1]
    assert not (root / "datasets" / "__init__.py").exists()


def test_commands_that_need_no_model_import_no_model_library(tiny_beir, tmp_path):
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from harness.cli import cli\n"
        f"for args in (['validate', {str(tiny_beir)!r}], ['datasets', 'list', '--data-dir', {str(tmp_path)!r}],\n"
        f"             ['cache', 'list', '--cache-dir', {str(tmp_path)!r}],\n"
        f"             ['convert', '--eval-set', 'tests/data/lesson.json', '--out', {str(tmp_path / 'out')!r}]):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0, args\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'faiss') if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("running", "data", "results", "machine", "scoring", "judging", "judgments", "options")


def _imported(*args: str) -> tuple[list[str], str]:
    """Every module `python -X importtime -m harness ARGS` imports, in order, and what it printed."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harness", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    names = [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return names, proc.stdout


def _harness_modules(*args: str) -> tuple[list[str], str]:
    """The harness modules `python -X importtime -m harness ARGS` imports, in order, and what it printed."""
    names, printed = _imported(*args)
    return [name for name in names if name == "harness" or name.startswith("harness.")], printed


def test_the_group_help_imports_at_most_a_dozen_harness_modules_and_no_command():
    modules, printed = _harness_modules("--help")
    assert len(modules) <= 12, modules
    assert not [m for m in modules if m.removeprefix("harness.cli.") in FAMILIES], modules
    assert not [m for m in modules if m == "harness.api" or m.startswith("harness.api.")], modules
    assert "evaluate" in printed and "judgments" in printed  # the table lists every command


def test_a_command_s_help_imports_its_own_family_alone():
    modules, printed = _harness_modules("score", "--help")
    assert "--per-query" in printed
    assert "harness.cli.scoring" in modules
    assert not [m for m in modules if m.removeprefix("harness.cli.") in set(FAMILIES) - {"scoring", "options"}], modules


def test_evaluate_s_help_imports_no_other_api_family_and_nothing_heavy():
    # `harness.api` loads a name's module on first use, so evaluate --help imports its command family, the API's
    # `choices` and the registries its options' choices are read from (21 harness modules; --engine's names live in
    # harness.engines itself, not in the Ray engine's 10 modules); importing every family eagerly made it 94.
    names, printed = _imported("evaluate", "--help")
    modules = [name for name in names if name == "harness" or name.startswith("harness.")]
    assert "--model" in printed and "--engine" in printed
    assert len(modules) <= 22, modules
    assert [m for m in modules if m.startswith("harness.api.")] == ["harness.api.choices"], modules
    others = [m for m in modules if m.removeprefix("harness.cli.") in set(FAMILIES) - {"running", "options"}]
    assert not others, others
    layers = ("harness.pipeline.", "harness.evaluation.", "harness.reporting.", "harness.judging.")
    assert not [m for m in modules if m.startswith(layers) or f"{m}." in layers], modules
    assert not [name for name in names if name.split(".")[0] in (*HEAVY, "scipy", "sklearn")], names


def test_importing_the_command_line_reads_no_registry():
    code = "import sys\nimport harness.cli\nprint(sorted(m for m in sys.modules if m.startswith('harness.')))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert set(ast.literal_eval(proc.stdout)) <= {
        "harness.cli",
        "harness.cli.commands",
        "harness.cli.group",
        "harness.errors",
    }
