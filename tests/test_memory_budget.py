"""The memory budget: the default compares a search's own needs with the memory free (not the process's size), a
given budget too small to search is refused before anything is encoded, and a message names the setting only
when it was given."""

from __future__ import annotations

import pytest
from cli_runner import invoke

from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.retrieval import streamed
from harness.retrieval.encode import HashingEncoder

GIB = 1 << 30


def _config(folder, tmp_path, budget=None) -> EvaluateConfig:
    return EvaluateConfig(
        dataset_path=folder,
        model="hash:64",
        output_dir=None,
        progress=False,
        cache_dir=tmp_path / "cache",
        memory_budget=budget,
    )


@pytest.fixture
def large_process(monkeypatch):
    """This process holds 20 GiB and 4 GiB more are available (a notebook, a test runner on a full machine)."""
    monkeypatch.setattr(streamed, "resident_bytes", lambda: 20 * GIB)
    monkeypatch.setattr(streamed, "proc_bytes", lambda path, name: 4 * GIB if name == "MemAvailable" else None)


def test_a_large_process_searches_a_small_corpus_in_memory(tiny_beir, tmp_path, large_process):
    outcome = evaluate_dataset(_config(tiny_beir, tmp_path))
    assert outcome.result.config["search"] == "in-memory"
    assert not any("memory" in note for note in outcome.result.notes)


def test_the_default_streams_when_the_search_needs_more_than_half_the_memory_free(tiny_beir, tmp_path, monkeypatch):
    # The in-memory search of the tiny corpus needs a few MB (two 16,384-row chunks of 64-d float32: 8 MiB);
    # 1 MiB free, half of it for the search: the vectors stream, however small the process is.
    monkeypatch.setattr(streamed, "resident_bytes", lambda: 100 << 20)
    monkeypatch.setattr(streamed, "proc_bytes", lambda path, name: 1 << 20 if name == "MemAvailable" else None)
    assert streamed.default_budget() == (100 << 20) + (1 << 19)
    outcome = evaluate_dataset(_config(tiny_beir, tmp_path))
    assert outcome.result.config["search"] == "streamed"
    note = next(note for note in outcome.result.notes if note.startswith("streamed exact search"))
    assert "memory_budget" not in note and "half the memory available" in note  # nobody set a budget


def test_a_given_budget_too_small_is_refused_before_anything_is_encoded(tiny_beir, tmp_path, monkeypatch):
    calls = []
    original = HashingEncoder.encode_docs
    monkeypatch.setattr(
        HashingEncoder, "encode_docs", lambda self, texts: calls.append(len(texts)) or original(self, texts)
    )
    result = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            "hash:64",
            "--memory-budget",
            "1MB",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "--memory-budget 1.00 MiB is too small for a streamed search" in result.output
    assert calls == []  # refused before the corpus was encoded
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.npy"))


def test_the_default_budget_names_no_setting_when_it_is_too_small():
    with pytest.raises(streamed.MemoryBudgetError) as given:
        streamed.plan_search(1 << 20, 1 << 20, 100, 64, 10, 1000)
    with pytest.raises(streamed.MemoryBudgetError) as default:
        streamed.plan_search(1 << 20, 1 << 20, 100, 64, 10, 1000, given=False)
    assert "`memory_budget` 1.00 MiB is too small" in str(given.value) and "raise it to" in str(given.value)
    assert str(default.value).startswith("the memory this process may use (1.00 MiB")
    assert "free memory" in str(default.value)
