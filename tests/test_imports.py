"""Heavy libraries load lazily: --help and importing the CLI must not pull them in."""

from __future__ import annotations

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
