"""The model-prompts registry (harness/data/model-prompts.csv): the file, MTEB's own metadata, and how an
evaluation uses it (same configuration as the prefixes given by hand, recorded, overridable, and second to a
model's own sentence-transformers prompts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import invoke

import harness.datasets.prompts
from harness.datasets import published
from harness.datasets.prompts import FIELDS, SOURCES, model_prompts, parse_prompts
from harness.errors import HarnessError

WORDS = "apple banana cherry date zucchini fruit stone fig elder grape kiwi lemon query passage q".split()


def test_registry_file_is_valid():
    import csv
    import importlib.resources

    text = importlib.resources.files("harness").joinpath("data/model-prompts.csv").read_text(encoding="utf-8")
    raw = list(csv.reader(text.splitlines()))
    assert tuple(raw[0]) == FIELDS and all(len(row) == len(FIELDS) for row in raw)
    names = [row[0] for row in raw[1:]]
    assert len(names) == len(set(names)) == 28  # unique, no empty rows
    rows = model_prompts()
    assert all(row.model and row.source in SOURCES for row in rows.values())
    # Every row is a dense model of the published table (by its hub id or an alias of one of its systems).
    systems = {row.system for row in published.published_scores()}
    assert set(rows) <= systems | set(published.aliases()), set(rows) - systems
    # ...and every hub-named dense system there has a row (BM25's MTEB baseline is the one sparse hub name).
    dense = {system for system in systems if "/" in system} - {"mteb/baseline-bm25s"}
    assert dense | {"sentence-transformers/msmarco-distilbert-base-tas-b"} == set(rows)  # tas-b by its alias
    assert rows["intfloat/e5-base-v2"].query_prompt == "query: "  # the trailing space survives the CSV


def test_registry_agrees_with_mteb_model_metadata():
    mteb = pytest.importorskip("mteb")
    for row in model_prompts().values():
        if row.source == "paper":  # a model MTEB does not list
            with pytest.raises(KeyError):
                mteb.get_model_meta(row.model)
            continue
        meta = mteb.get_model_meta(row.model)
        prompts = (meta.loader_kwargs or {}).get("model_prompts") or {}
        assert (row.query_prompt, row.doc_prompt) == (prompts.get("query", ""), prompts.get("document", "")), row
        assert row.normalize == (str(getattr(meta.similarity_fn_name, "value", meta.similarity_fn_name)) == "cosine")
        assert row.max_tokens == (int(meta.max_tokens) if meta.max_tokens else None), row


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "model,query_prompt,doc_prompt,max_tokens,normalize,source,note,pooling\n",
            "model-prompts.csv:1: unknown column(s) pooling; the columns are model, query_prompt",
        ),
        (
            "model,query_prompt,doc_prompt,max_tokens,normalize,source,note\na,q: ,,,true,mteb,\na,,,,true,mteb,\n",
            "model-prompts.csv:3: model a is listed twice",
        ),
        (
            "model,query_prompt,doc_prompt,max_tokens,normalize,source,note\na,q: ,,,true,blog,\n",
            "model-prompts.csv:2: unknown source 'blog'",
        ),
        (
            "model,query_prompt,doc_prompt,max_tokens,normalize,source,note\n,q: ,,,true,mteb,\n",
            "model-prompts.csv:2: empty model name",
        ),
    ],
    ids=["unknown-column", "repeated-model", "unknown-source", "empty-model"],
)
def test_bad_registry_rows_are_one_line(text, message):
    with pytest.raises(HarnessError) as caught:
        parse_prompts(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def _bi_encoder(folder: Path, prompts: dict[str, str] | None = None) -> Path:
    """A 1-layer BERT bi-encoder with random weights and a word-level vocabulary (prompts in its config)."""
    from tiny_models import bi_encoder

    return bi_encoder(folder, WORDS, layers=1, positions=64, prompts=prompts)


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory) -> Path:
    return _bi_encoder(tmp_path_factory.mktemp("models") / "plain")


@pytest.fixture(scope="module")
def prompted_model(tmp_path_factory) -> Path:
    return _bi_encoder(tmp_path_factory.mktemp("models") / "prompted", {"query": "query: ", "document": "passage: "})


@pytest.fixture
def registry_naming(monkeypatch):
    """Point the registry at a table naming the given local models (with query: / passage: prompts)."""

    def use(*models: Path, normalize: str = "true") -> None:
        lines = [",".join(FIELDS), *(f'{model},"query: ","passage: ",32,{normalize},mteb,' for model in models)]
        rows = parse_prompts("\n".join(lines) + "\n")
        monkeypatch.setattr(harness.datasets.prompts, "model_prompts", lambda: rows)

    return use


def _evaluate(folder, out, *options):
    result = invoke(
        ["-q", "evaluate", str(folder), "--output-dir", str(out), "--json", "--no-cache", "--k", "1,3", *options]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_registry_prompts_are_the_prefixes_given_by_hand(plain_model, registry_naming, tiny_beir, tmp_path):
    registry_naming(plain_model)
    auto, log = _evaluate(tiny_beir, tmp_path / "a", "--model", str(plain_model))
    assert "prompts from the model registry" in log and "'query: '" in log
    assert auto["config"]["prompts"] == "from the model registry"
    by_hand, log = _evaluate(
        tiny_beir, tmp_path / "b", "--model", str(plain_model), "--query-prefix", "query: ", "--doc-prefix", "passage: "
    )
    assert "prompts from the model registry" not in log and "prompts" not in by_hand["config"]
    # One configuration, and the texts really carried the prompts: the same numbers as by hand...
    assert auto["config_hash"] == by_hand["config_hash"] and auto["metrics"] == by_hand["metrics"]
    assert auto["config"]["query_prefix"] == "query: " and auto["config"]["doc_prefix"] == "passage: "
    # ...and not the ones without them (random weights: the prompt tokens move every vector).
    bare, _ = _evaluate(tiny_beir, tmp_path / "c", "--model", str(plain_model), "--query-prefix", "q ")
    assert bare["config_hash"] != auto["config_hash"] and "prompts" not in bare["config"]


def test_an_empty_prefix_given_turns_the_registry_off(plain_model, registry_naming, tiny_beir, tmp_path):
    registry_naming(plain_model)
    none, log = _evaluate(tiny_beir, tmp_path / "a", "--model", str(plain_model), "--query-prefix", "")
    assert "prompts from the model registry" not in log and "prompts" not in none["config"]
    assert none["config"]["query_prefix"] == none["config"]["doc_prefix"] == ""
    from harness.pipeline.evaluate import EvaluateConfig, configuration

    assert none["config_hash"] == configuration(EvaluateConfig(tiny_beir, model=str(plain_model)), "tiny").config_hash


def test_a_model_with_its_own_prompts_keeps_them(prompted_model, registry_naming, tiny_beir, tmp_path):
    registry_naming(prompted_model)
    own, log = _evaluate(tiny_beir, tmp_path / "a", "--model", str(prompted_model))
    assert "prompts from the model registry" not in log and "prompts" not in own["config"]
    assert own["config"]["query_prefix"] == "" and own["config"]["query_prompt"] == {"query": "query: "}
    assert own["config"]["doc_prompt"] == {"document": "passage: "}


def test_bench_applies_registry_prompts_and_skips_the_done_cell(plain_model, registry_naming, tiny_beir, tmp_path):
    registry_naming(plain_model)
    args = [
        "-q",
        "bench",
        "--models",
        str(plain_model),
        "--datasets",
        str(tiny_beir),
        "--output-dir",
        str(tmp_path / "r"),
        "--k",
        "1,3",
        "--no-cache",
    ]
    first = invoke(args)
    assert first.exit_code == 0, first.output
    assert f"tiny × {plain_model}: {plain_model}: prompts from the model registry" in first.stderr
    stored = json.loads(next((tmp_path / "r").rglob("test*.json")).read_text())
    assert stored["config"]["prompts"] == "from the model registry" and stored["config"]["query_prefix"] == "query: "
    again = invoke(args)
    assert again.exit_code == 0 and "1 cells: 0 done, 1 skipped" in again.stdout, again.output


def test_another_similarity_than_the_published_one_is_said_once(plain_model, registry_naming, tiny_beir, tmp_path):
    registry_naming(plain_model, normalize="false")
    _, log = _evaluate(tiny_beir, tmp_path / "a", "--model", str(plain_model))
    assert log.count("its published scores use raw dot products") == 1, log
    _, log = _evaluate(tiny_beir, tmp_path / "b", "--model", str(plain_model), "--similarity", "dot")
    assert "its published scores use" not in log
