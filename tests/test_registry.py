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

    text = importlib.resources.files("harness").joinpath("data/published-scores.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    assert len(rows) > 30
    keys = set()
    for row in rows:
        registry.get(row["dataset"])  # every dataset is a registry name
        assert row["split"] == registry.get(row["dataset"]).eval_split
        assert 0 < float(row["ndcg@10"]) < 1
        assert row["source"] and row["variant"]
        key = (row["dataset"], row["system"], row["variant"], row["split"])
        assert key not in keys
        keys.add(key)


def test_cqadupstack_knows_its_forums():
    forums = registry.get("cqadupstack").subsets
    assert len(forums) == 12 and "android" in forums and "wordpress" in forums
    assert all(not spec.subsets for name, spec in registry.datasets().items() if name != "cqadupstack")
    assert registry.get("nfcorpus").zip_bytes == 2_400_000
