"""The BEIR dataset table shipped as package data."""

from __future__ import annotations

import csv
import json
import re
from importlib import resources
from pathlib import Path

import pytest

from harness.datasets import registry
from harness.datasets.catalog import _check_counts
from harness.datasets.registry import DatasetSpec, count_mismatch
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


# The registry-name count checks compare both counts.
#
# A folder imported (or evaluated) under a registry name must have the registry's number of documents AND
# of judged evaluation-split queries. Each count is changed on its own in turn; the reference is the
# registry's CSV read here with the csv module, and counts taken by looping over the files written here.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


def registry_rows():
    text = resources.files("harness").joinpath("data/beir-datasets.csv").read_text(encoding="utf-8")
    return {row["name"]: row for row in csv.DictReader(text.splitlines())}


@pytest.mark.parametrize("name", ["scifact", "nfcorpus", "msmarco"])
@pytest.mark.parametrize("docs_off, queries_off", [(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (2, 3)])
def test_count_mismatch_compares_documents_and_queries(name, docs_off, queries_off):
    row = registry_rows()[name]
    n_docs, n_queries = int(row["corpus_docs"]) + docs_off, int(row["queries"]) + queries_off
    why = count_mismatch(name, row["eval_split"], n_docs, n_queries)
    assert bool(why) == ((docs_off, queries_off) != (0, 0))
    if why:
        assert f"{n_docs:,} documents" in why and f"{n_queries:,} judged {row['eval_split']} queries" in why
        assert f"{int(row['corpus_docs']):,}" in why and f"{int(row['queries']):,}" in why


@pytest.mark.parametrize("docs_off, mismatch", [(0, False), (1, True), (-1, True)])
def test_on_another_split_only_the_documents_count(docs_off, mismatch):
    row = registry_rows()["scifact"]
    assert row["eval_split"] == "test"
    why = count_mismatch("scifact", "train", int(row["corpus_docs"]) + docs_off, 7)
    assert bool(why) == mismatch
    assert "judged" not in why


def test_unknown_names_and_forums_pass():
    assert count_mismatch("my-own-set", "test", 1, 1) == ""
    assert count_mismatch("cqadupstack", "test", 1, 1) == ""


def _folder(root: Path, n_docs: int, queries: list[str], split: str = "test") -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": "x"}) + "\n" for i in range(n_docs)) + "\n"
    )  # a blank line is no document
    (root / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\td{i % max(n_docs, 1)}\t1\n" for q in queries for i in range(2))
    )  # two judgments a query
    return root


def _spec(n_docs, n_queries, subsets=()):
    return DatasetSpec(
        name="tiny",
        eval_split="test",
        n_queries=n_queries,
        n_docs=n_docs,
        avg_rel_per_query=None,
        zip_mb=None,
        md5=None,
        public=True,
        ignore_identical_ids=False,
        note="",
        subsets=subsets,
    )


@pytest.mark.parametrize("docs_off, queries_off", [(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1)])
def test_an_import_under_a_registry_name_checks_both_counts(tmp_path, docs_off, queries_off):
    queries = ["q1", "q2", "q3"]
    folder = _folder(tmp_path / "f", 5, queries)
    n_docs_by_hand = sum(1 for line in (folder / "corpus.jsonl").read_text().splitlines() if line.strip())
    n_queries_by_hand = len(
        {line.split("\t")[0] for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    )
    spec = _spec(n_docs_by_hand + docs_off, n_queries_by_hand + queries_off)
    if (docs_off, queries_off) == (0, 0):
        assert _check_counts(folder, spec) == {"n_docs": 5, "n_queries": 3}
    else:
        with pytest.raises(
            DatasetError,
            match=f"has 5 documents and 3 judged test queries, the registry expects "
            f"{spec.n_docs:,} and {spec.n_queries:,}",
        ):
            _check_counts(folder, spec)


def test_forums_are_summed(tmp_path):
    _folder(tmp_path / "a", 2, ["q1"])
    _folder(tmp_path / "b", 3, ["q1", "q2"])  # q1 of another forum is another query
    assert _check_counts(tmp_path, _spec(5, 3, ("a", "b"))) == {"n_docs": 5, "n_queries": 3}
    with pytest.raises(DatasetError):
        _check_counts(tmp_path, _spec(5, 2, ("a", "b")))
    with pytest.raises(DatasetError):
        _check_counts(tmp_path, _spec(4, 3, ("a", "b")))


def test_a_folder_without_the_eval_split_is_refused(tmp_path):
    _folder(tmp_path / "f", 2, ["q1"], split="dev")
    with pytest.raises(DatasetError, match="lacks corpus.jsonl or qrels/test.tsv"):
        _check_counts(tmp_path / "f", _spec(2, 1))


def test_the_mismatch_says_both_sides_word_for_word():
    row = registry_rows()["scifact"]
    docs, queries = int(row["corpus_docs"]), int(row["queries"])
    tail = (
        "its numbers are not comparable with published scifact scores (give the folder another name to evaluate "
        "it as a custom dataset)"
    )
    assert count_mismatch("scifact", "test", 1234, 5) == (
        f"this folder has 1,234 documents and 5 judged test queries, the registry's scifact has {docs:,} and "
        f"{queries:,}: {tail}"
    )
    assert count_mismatch("scifact", "train", 1234, 5) == (
        f"this folder has 1,234 documents, the registry's scifact has {docs:,}: {tail}"
    )


def test_the_import_refusals_word_for_word(tmp_path):
    folder = _folder(tmp_path / "f", 5, ["q1", "q2", "q3"])
    with pytest.raises(DatasetError) as caught:
        _check_counts(folder, _spec(1234, 3))
    assert str(caught.value) == (
        "tiny: the archive has 5 documents and 3 judged test queries, the registry expects 1,234 and 3; not installed"
    )
    with pytest.raises(DatasetError) as caught:
        _check_counts(folder, _spec(5, 4), "the folder", "import it under another name")
    assert str(caught.value) == (
        "tiny: the folder has 5 documents and 3 judged test queries, the registry expects "
        "5 and 4; import it under another name"
    )
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(DatasetError) as caught:
        _check_counts(folder, _spec(5, 3))
    assert (
        str(caught.value)
        == f"{folder}: the archive lacks corpus.jsonl or qrels/test.tsv, so it cannot be tiny; not installed"
    )


def test_a_gzipped_corpus_is_counted_by_its_lines(tmp_path):
    import gzip

    folder = _folder(tmp_path / "f", 4, ["q1"])
    corpus = folder / "corpus.jsonl"
    (folder / "corpus.jsonl.gz").write_bytes(gzip.compress(corpus.read_bytes()))
    corpus.unlink()
    assert _check_counts(folder, _spec(4, 1)) == {"n_docs": 4, "n_queries": 1}
