"""The BEIR dataset table shipped as package data."""

from __future__ import annotations

import re

import pytest

from harness.datasets import registry
from harness.errors import DatasetError


def test_registry_rows_are_valid():
    specs = registry.datasets()
    assert len(specs) == 19
    assert sum(spec.public for spec in specs.values()) == 15
    for spec in specs.values():
        assert re.fullmatch(r"[a-z0-9-]+", spec.name)
        assert spec.eval_split in {"test", "dev"}
        assert spec.n_queries > 0 and spec.n_docs > 0
        if spec.public:
            assert spec.md5 and re.fullmatch(r"[0-9a-f]{32}", spec.md5)
            assert spec.zip_mb and spec.zip_mb > 0
        else:
            assert spec.md5 is None


def test_self_hit_policy_and_known_counts():
    assert registry.get("arguana").ignore_identical_ids
    assert registry.get("quora").ignore_identical_ids
    assert not registry.get("scifact").ignore_identical_ids
    assert registry.get("nfcorpus").md5 == "a89dba18a62ef92f7d323ec890a0d38d"
    assert (registry.get("scifact").n_docs, registry.get("scifact").n_queries) == (5183, 300)


def test_unknown_name_suggests_close_ones():
    with pytest.raises(DatasetError, match="did you mean scifact"):
        registry.get("scifct")
    assert registry.lookup("my-own") is None


def test_published_scores_table_is_valid():
    import csv
    import importlib.resources

    from harness.datasets import published

    text = importlib.resources.files("harness").joinpath("data/published-scores.csv").read_text(encoding="utf-8")
    reader = csv.DictReader(text.splitlines())
    assert reader.fieldnames == [
        "dataset",
        "system",
        "variant",
        "split",
        "ndcg@10",
        "recall@100",
        "mrr@10",
        "map@100",
        "source",
    ]
    assert len(list(reader)) == 1000
    rows = published.published_scores()
    keys = set()
    for row in rows:
        name, _, forum = row.dataset.partition("/")
        spec = registry.get(name)  # every dataset is a registry name (a forum one of its subsets)
        assert not forum or forum in spec.subsets
        assert row.split == spec.eval_split, row
        assert row.values and all(0 <= value <= 1 for value in row.values.values()), row
        assert "nDCG@10" in row.values
        assert row.source.strip() and row.variant.strip() and row.system.strip()
        key = (row.dataset, row.system, row.variant, row.split)
        assert key not in keys
        keys.add(key)
        assert " · " in row.column and row.family
    assert {row.family for row in rows} >= {"MTEB", "pyserini flat", "BEIR paper", "BEIR README ms-marco-MiniLM-L-6-v2"}
    assert {row.edition for row in rows if row.dataset == "webis-touche2020"} == {"v1", "v2", "v3"}
    systems = {row.system for row in rows}
    assert all(system in systems for system in published.aliases().values())


def test_the_registry_knows_mtebs_task_names():
    tasks = {
        "SciFact": "scifact",
        "NFCorpus": "nfcorpus",
        "FiQA2018": "fiqa",
        "ArguAna": "arguana",
        "SCIDOCS": "scidocs",
        "TRECCOVID": "trec-covid",
        "Touche2020": "webis-touche2020",
        "QuoraRetrieval": "quora",
        "NQ": "nq",
        "HotpotQA": "hotpotqa",
        "DBPedia": "dbpedia-entity",
        "FEVER": "fever",
        "ClimateFEVER": "climate-fever",
        "MSMARCO": "msmarco",
        "CQADupstackAndroidRetrieval": "cqadupstack/android",
        "CQADupstackWordpressRetrieval": "cqadupstack/wordpress",
        "CQADupstackGisRetrieval": "cqadupstack/gis",
    }
    for task, name in tasks.items():
        assert registry.from_mteb_task(task) == name
        assert registry.from_mteb_task(task.lower()) == name
        assert registry.mteb_task(name) == task
    assert registry.get("msmarco").eval_split == "dev"
    assert registry.mteb_task("bioasq") is None and registry.from_mteb_task("Banking77Classification") is None


def test_an_mteb_task_name_resolves_to_the_installed_dataset(tmp_path):
    import shutil

    from conftest import DATA

    from harness.datasets.catalog import STAMP, resolve_dataset

    shutil.copytree(DATA / "tiny", tmp_path / "scifact")
    (tmp_path / "scifact" / STAMP).write_text("{}")
    folder, name = resolve_dataset("SciFact", tmp_path, download=False)
    assert name == "scifact"


def test_cqadupstack_knows_its_forums():
    forums = registry.get("cqadupstack").subsets
    assert len(forums) == 12 and "android" in forums and "wordpress" in forums
    assert all(not spec.subsets for name, spec in registry.datasets().items() if name != "cqadupstack")
    assert registry.get("nfcorpus").zip_bytes == 2_400_000


def test_one_function_makes_the_cqadupstack_mean():
    forums = registry.get("cqadupstack").subsets
    values = {forum: i / 10 for i, forum in enumerate(forums)}
    assert registry.subset_mean("cqadupstack", values) == (pytest.approx(sum(range(12)) / 120), [])
    assert registry.subset_mean("cqadupstack", {**values, "tex": None}) == (None, ["tex"])
    assert registry.subset_mean("cqadupstack", {"android": 0.5})[1] == [f for f in forums if f != "android"]
