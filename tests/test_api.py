"""The Python API: lazy names on the package, and the examples of the README and the docs' home page, executed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python_examples(page: str) -> list[str]:
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_documented_examples_run(tmp_path, monkeypatch, capsys, page):
    examples = _python_examples(page)
    assert len(examples) == 3
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for example in examples:
        exec(compile(example, page, "exec"), namespace)  # noqa: S102 - our own documentation
    out = capsys.readouterr().out
    assert "bm25: nDCG@10 0.7226" in out and "Recall@100" in out and "'nDCG@10':" in out
    assert not list(tmp_path.iterdir())  # output_dir=None wrote nothing


def test_import_harness_loads_nothing_heavy_until_a_name_is_used():
    code = ("import sys, harness; assert 'harness.api' not in sys.modules and 'torch' not in sys.modules; "
            "from harness import score, Qrels; assert 'harness.api' in sys.modules; "
            "print(score(Qrels({'q': {'d': 1}}), {'q': {'d': 1.0}}, ['nDCG@10']).means)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "{'nDCG@10': 1.0}" in result.stdout


def test_the_api_names_a_wrong_setting():
    from harness import evaluate
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="unknown setting `topk`"):
        evaluate("scifact", model="bm25", topk=10)
    with pytest.raises(AttributeError):
        import harness

        harness.no_such_name  # noqa: B018
