"""The Python API: lazy names on the package, and the examples of the README and the docs' home page, executed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import invoke

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
    code = (
        "import sys, harness; assert 'harness.api' not in sys.modules and 'torch' not in sys.modules; "
        "from harness import score, Qrels; assert 'harness.api' in sys.modules; "
        "print(score(Qrels({'q': {'d': 1}}), {'q': {'d': 1.0}}, ['nDCG@10']).means)"
    )
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


# --------------------------------------------------------------------------- every command as a function (docs/python-api.md)

import csv  # noqa: E402 - this block is kept apart from the one above (merges)
import io  # noqa: E402
import json  # noqa: E402
from collections import defaultdict  # noqa: E402

import harness  # noqa: E402
import harness.api  # noqa: E402 - a submodule: `harness.api` is not a lazy name
from harness.errors import HarnessError  # noqa: E402

PAGES_WITH_EXAMPLES = {"README.md", "docs/evaluate.md", "docs/index.md", "docs/outputs.md", "docs/python-api.md"}


def _all_examples(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(encoding="utf-8"), re.S)


def test_every_python_example_of_the_docs_is_run_by_a_test():
    pages = {
        str(path.relative_to(ROOT))
        for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
        if _all_examples(str(path.relative_to(ROOT)))
    }
    assert pages == PAGES_WITH_EXAMPLES, "a page with a ```python example needs a test that runs it (here)"


def test_the_python_api_page_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BEIR_HARNESS_DATA_DIR", raising=False)
    namespace: dict = {}
    for example in _all_examples("docs/python-api.md"):
        exec(compile(example, "docs/python-api.md", "exec"), namespace)  # noqa: S102 - our own documentation
    out = capsys.readouterr()
    assert "3 2 3\nTrue\n" in out.out and "| demo | **0.7226** |" in out.out  # bm25's 0.7226: as the README's
    assert "3 pairs to judge" in out.out and "3 pairs added; 1 changed" in out.out and "['shop']" in out.out
    assert "demo: candidate set 77ccec83 (top 10 of bm25) reranked by a, b" in out.out  # as the page shows it
    assert "%|" not in out.err and "Loading weights" not in out.err  # no progress bar, ours or Hugging Face's
    assert (tmp_path / "report.html").read_text(encoding="utf-8").startswith("<!doctype html>")
    assert not (tmp_path / "results" / "demo" / "fusion").exists()  # fuse without output_dir wrote nothing


def test_the_late_interaction_page_builds_a_folder_the_harness_evaluates_as_multi_vector(tmp_path, monkeypatch):
    """docs/evaluate.md's example saves the packaged model as a MultiVectorEncoder folder: the harness must read it
    as the multi-vector kind, and sentence-transformers must give one token vector per token."""
    import numpy as np
    from sentence_transformers import MultiVectorEncoder

    from harness.retrieval.index.multivector import is_multi_vector_folder

    monkeypatch.chdir(tmp_path)
    (example,) = _all_examples("docs/evaluate.md")
    exec(compile(example, "docs/evaluate.md", "exec"), {})  # noqa: S102 - our own documentation
    assert is_multi_vector_folder(tmp_path / "minilm-multi-vector")
    tokens = MultiVectorEncoder(str(tmp_path / "minilm-multi-vector"), device="cpu").encode_query(["late interaction"])
    assert np.asarray(tokens[0]).ndim == 2 and np.asarray(tokens[0]).shape[1] == 384


def test_every_function_of_the_api_is_documented():
    import inspect

    for name in harness.api.__all__:
        value = getattr(harness, name)
        assert value.__doc__, name
        if inspect.isfunction(value):
            assert "Returns:" in value.__doc__, f"{name}'s docstring has no Returns:"
            if len(inspect.signature(value).parameters) > 1:
                assert "Args:" in value.__doc__, f"{name}'s docstring has no Args:"
    assert set(harness.api.__all__) == set(harness._API)


@pytest.fixture
def results_dir(tiny_beir, tmp_path, monkeypatch):
    """bm25 and hash:64 results on the tiny set, with their runs."""
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    for model in ("bm25", "hash:64"):
        harness.evaluate(tiny_beir, model=model, output_dir=tmp_path / "results", k_values=(1, 3, 10))
    return tmp_path / "results"


def _stored(results_dir):
    """label → the result JSON as written (read here with json, not by the harness)."""
    files = [p for p in results_dir.rglob("*.json") if "run" not in p.name]
    return {data["label"]: data for data in (json.loads(p.read_text(encoding="utf-8")) for p in files)}


def _trec(path):
    run = defaultdict(dict)
    for line in path.read_text(encoding="utf-8").splitlines():
        query_id, _, doc_id, _, value, _ = line.split()
        run[query_id][doc_id] = float(value)
    return run


def test_report_compare_and_export_give_the_stored_values(results_dir):
    from scipy.stats import ttest_rel

    stored = _stored(results_dir)
    comparison = harness.report(results_dir, "ndcg_cut_3")
    assert isinstance(comparison, harness.Comparison) and comparison.metric == "nDCG@3"
    for label, data in stored.items():
        assert comparison.value("tiny", label) == pytest.approx(data["metrics"]["nDCG@3"])
    assert "| tiny |" in comparison.render("markdown") and comparison.render("csv").startswith("dataset")

    first, second = sorted(harness.read_results(results_dir), key=lambda r: r.label)
    (test,) = harness.compare(first, second, ["nDCG@3"], rounds=200)
    a, b = (stored[r.label]["per_query"] for r in (first, second))
    queries = sorted(a)
    assert test.mean_b - test.mean_a == pytest.approx(
        sum(b[q]["nDCG@3"] - a[q]["nDCG@3"] for q in queries) / len(queries)
    )
    expected_p = ttest_rel([b[q]["nDCG@3"] for q in queries], [a[q]["nDCG@3"] for q in queries]).pvalue
    assert test.p_t_test == pytest.approx(expected_p)

    rows = list(csv.DictReader(io.StringIO(harness.export(results_dir, "csv", metrics=["nDCG@3"]))))
    assert len(rows) == 6 and {row["metric"] for row in rows} == {"nDCG@3"}
    for row in rows:
        assert float(row["value"]) == stored[row["system"]]["per_query"][row["query_id"]]["nDCG@3"]
    with pytest.raises(HarnessError, match="writes a folder"):
        harness.export(results_dir, "trec")
    with pytest.raises(HarnessError, match="has no cutoff"):
        harness.report(results_dir, "map")


def test_fuse_is_brute_force_rrf_scored_by_pytrec_eval(results_dir, tiny_beir, tmp_path):
    import pytrec_eval

    paths = sorted(p for p in results_dir.rglob("test.json"))
    fused = harness.fuse(paths, "rrf")
    runs = [_trec(p.with_name("test.run.trec")) for p in paths]
    rrf = defaultdict(dict)
    for run in runs:
        for query_id, docs in run.items():
            ranked = sorted(docs, key=lambda d: (docs[d], d), reverse=True)  # trec_eval's: score, then doc id desc
            for rank, doc_id in enumerate(ranked, 1):
                rrf[query_id][doc_id] = rrf[query_id].get(doc_id, 0.0) + 1 / (60 + rank)
    qrels = {}
    for line in (tiny_beir / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query_id, doc_id, grade = line.split("\t")
        qrels.setdefault(query_id, {})[doc_id] = int(grade)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3"}).evaluate(dict(rrf))
    expected = sum(per_query.get(q, {"ndcg_cut_3": 0.0})["ndcg_cut_3"] for q in qrels) / len(qrels)
    assert fused.metrics["nDCG@3"] == pytest.approx(expected)
    assert not (results_dir / "tiny" / "fusion").exists()  # output_dir=None: nothing written
    harness.fuse(paths, "rrf", output_dir=tmp_path / "fused")
    (written,) = (tmp_path / "fused").rglob("*.run.trec")
    assert _trec(written) == {q: pytest.approx(docs) for q, docs in rrf.items()}  # the scores, not only the order


def test_pool_is_the_union_of_each_runs_top_depth_minus_the_judged(results_dir, tiny_beir, tmp_path):
    paths = sorted(results_dir.rglob("test.run.trec"))
    manifest = harness.pool(tiny_beir, tmp_path / "pool", runs=paths, depth=2)
    judged = set()
    for split in ("test", "dev"):
        for line in (tiny_beir / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]:
            judged.add(tuple(line.split("\t")[:2]))
    pooled = set()
    for run in map(_trec, paths):
        for query_id, docs in run.items():
            pooled |= {(query_id, d) for d in sorted(docs, key=lambda d: (docs[d], d), reverse=True)[:2]}
    assert manifest["counts"]["pairs"] == len(pooled - judged)
    written = list(csv.DictReader((tmp_path / "pool" / "pool.csv").open(encoding="utf-8")))
    assert {(row["query_id"], row["doc_id"]) for row in written} == pooled - judged


def test_merge_and_agreement_kappa_is_scikit_learns(tiny_beir, tmp_path):
    from sklearn.metrics import cohen_kappa_score

    pairs = [("q1", "d3"), ("q1", "d4"), ("q2", "d1"), ("q3", "d2"), ("q4", "d5")]
    alice, bob = [0, 1, 2, 3, 1], [0, 2, 2, 1, 1]
    for name, grades in (("alice", alice), ("bob", bob)):
        lines = ["query_id,doc_id,grade,annotator", *(f"{q},{d},{g},{name}" for (q, d), g in zip(pairs, grades))]
        (tmp_path / f"{name}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    files = [tmp_path / "alice.csv", tmp_path / "bob.csv"]
    (pair,) = harness.agreement(files, scale="0-3").pairs
    assert pair.kappa == pytest.approx(cohen_kappa_score(alice, bob, weights="linear", labels=[0, 1, 2, 3]))
    merged = harness.merge_judgments(tiny_beir, files, resolve="max")
    assert merged.added == 5 and merged.written
    written = (tiny_beir / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    assert "q1\td4\t2" in written and "q3\td2\t3" in written  # max of 1 and 2; of 3 and 1
    with pytest.raises(HarnessError, match="scale"):
        harness.agreement(files, scale="0-2")


def test_convert_retrieve_and_datasets_from_python(tmp_path, monkeypatch):
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "d.csv").write_text("sku|body\nA|red shoes\nB|blue coat\n", encoding="utf-8")
    (tmp_path / "q.csv").write_text("qid|query\nq1|red shoes\n", encoding="utf-8")
    (tmp_path / "j.csv").write_text("qid|doc|grade\nq1|A|1\n", encoding="utf-8")
    tables = [tmp_path / name for name in ("d.csv", "q.csv", "j.csv")]
    with pytest.raises(HarnessError, match="unknown setting `delimeter`"):
        harness.convert(tmp_path / "x", *tables, delimeter="pipe")
    with pytest.raises(HarnessError, match="unknown column role 'doc_id'"):
        harness.convert(tmp_path / "x", *tables, columns={"doc_id": "sku"})
    assert not (tmp_path / "x").exists()
    summary = harness.convert(
        tmp_path / "set", *tables, delimiter="pipe", columns={"corpus_id": "sku", "qrels_doc": "doc"}
    )
    assert (summary.n_docs, summary.n_judgments) == (2, 1)
    docs = [json.loads(line) for line in (tmp_path / "set" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(d["_id"], d["text"]) for d in docs] == [("A", "red shoes"), ("B", "blue coat")]
    assert harness.validate(tmp_path / "set").ok

    run = harness.retrieve(tmp_path / "set", tmp_path / "run.trec", "bm25", top_k=5)
    assert _trec(tmp_path / "run.trec") == {q: {h.doc_id: pytest.approx(h.score) for h in run[q]} for q in run}
    assert harness.coverage(tmp_path / "set", tmp_path / "run.trec", k=1).judged_at_k == 1.0

    installed = harness.import_dataset(tmp_path / "set", tmp_path / "data", name="shop")
    assert installed.path.is_dir()
    assert "shop" in [row["name"] for row in harness.list_datasets(tmp_path / "data")]
    assert harness.remove_dataset("shop", tmp_path / "data") and not installed.path.exists()


def test_bench_from_python_scores_as_pytrec_eval(tiny_beir, tmp_path, monkeypatch):
    import pytrec_eval

    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    grid = harness.bench("bm25, hash:64", [tiny_beir], output_dir=tmp_path / "out", k_values=(1, 3))
    assert [cell.status for cell in grid.cells] == ["done", "done"]
    qrels = {"q1": {"d1": 2, "d2": 1}, "q2": {"d3": 1, "d4": 0}, "q3": {"d5": 1}}  # tests/data/tiny's test split
    for cell in grid.cells:
        (path,) = [
            p
            for p in (tmp_path / "out").rglob("test.run.trec")
            if json.loads(p.with_name("test.json").read_text(encoding="utf-8"))["label"] == cell.model
        ]
        per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3"}).evaluate(dict(_trec(path)))
        expected = sum(per_query.get(q, {"ndcg_cut_3": 0.0})["ndcg_cut_3"] for q in qrels) / len(qrels)
        assert cell.metrics["nDCG@3"] == pytest.approx(expected)
    with pytest.raises(HarnessError, match="unknown setting `k`"):
        harness.bench(["bm25"], [tiny_beir], k=3)


@pytest.mark.parametrize(
    ("argv", "function"),
    [
        (["convert", "--qrels", "q.csv", "--out", "o"], "convert"),
        (["report", "r"], "report"),
        (["report", "r", "--format", "html"], "report_page"),
        (["report", "r", "--check-published"], "check_published"),
        (["report", "r", "--compression"], "compression"),
        (["report", "r", "--cost"], "cost"),
        (["export", "r", "--format", "csv"], "export"),
        (["pool", "d", "--systems", "bm25", "--out", "p"], "pool"),
        (["judgments", "merge", ".", "a.csv"], "merge_judgments"),
        (["judgments", "agreement", "."], "agreement"),
        (["bench", "--models", "bm25", "--datasets", "x"], "bench"),
        (["retrieve", "x", "--out", "r.trec", "--model", "bm25"], "retrieve"),
        (["validate", "x"], "validate"),
        (["inspect", "a.json"], "inspect_results"),
        (["demo", "--model", "bm25"], "demo"),
        (["crosscheck", "x"], "crosscheck"),
        (["datasets", "list"], "list_datasets"),
        (["datasets", "download", "x"], "download_dataset"),
        (["datasets", "import", "x"], "import_dataset"),
        (["datasets", "remove", "x"], "remove_dataset"),
        (["cache", "list"], "cache_entries"),
        (["cache", "clear", "--dry-run"], "clear_cache"),
        (["cache", "prune", "--max-size", "10GB"], "prune_cache"),
        (["env"], "environment"),
    ],
)
def test_the_commands_call_the_api(argv, function, monkeypatch, tmp_path):

    class Called(Exception):
        pass

    def spy(*args, **kwargs):
        raise Called(function)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(harness.api, function, spy)
    if function in ("report", "report_page", "check_published", "compression", "cost", "inspect_results"):
        monkeypatch.setattr("harness.reporting.comparison.load_results", lambda *a, **k: [None])
    result = invoke(argv)
    assert isinstance(result.exception, Called), result.output


def _tiny_bi_encoder(folder: Path) -> Path:
    """A 1-layer BERT bi-encoder with random weights and a word-level vocabulary (no download)."""
    from tiny_models import bi_encoder

    words = "apple banana cherry date fig grape".split()
    return bi_encoder(folder / "model", words, hidden=16, layers=1, positions=32, init=None, max_seq_length=16)


def test_evaluate_draws_no_loading_weights_bar_unless_asked(tiny_beir, tmp_path, capfd, monkeypatch):
    import importlib

    import transformers.utils.logging as transformers_logging

    # The CLI's tests set HF_HUB_DISABLE_PROGRESS_BARS in this process (as `beir-harness` does): undo it here.
    hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")
    monkeypatch.setattr(hub_tqdm, "HF_HUB_DISABLE_PROGRESS_BARS", None)
    monkeypatch.setattr(hub_tqdm, "progress_bar_states", {})
    was = transformers_logging.is_progress_bar_enabled()
    transformers_logging.enable_progress_bar()  # a user who never touched the bars
    try:
        model = str(_tiny_bi_encoder(tmp_path))
        capfd.readouterr()
        quiet = harness.evaluate(tiny_beir, model=model, output_dir=None, cache=False)
        assert "Loading weights" not in capfd.readouterr().err and quiet.metrics
        assert transformers_logging.is_progress_bar_enabled()  # the caller's own setting, back after the call
        harness.evaluate(tiny_beir, model=model, output_dir=None, cache=False, progress=True)
        assert "Loading weights" in capfd.readouterr().err  # the test can see the bar when it is drawn
    finally:
        (transformers_logging.enable_progress_bar if was else transformers_logging.disable_progress_bar)()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda d: harness.convert(d / "out", qrels=d / "j.csv", delimeter="pipe"),
            "unknown setting `delimeter`; convert takes ",
        ),
        (
            lambda d: harness.convert(d / "out", qrels=d / "j.csv", columns={"doc_id": "sku"}),
            "unknown column role 'doc_id'; use corpus_id, corpus_text",
        ),
        (lambda d: harness.bench(["bm25"], [d], k=3), "unknown setting `k`; EvaluateConfig has"),
        (lambda d: harness.report_page(d, metrc="nDCG@10"), "unknown setting `metrc`; the page takes alpha"),
        (lambda d: harness.export(d, "xlsx"), "unknown export format 'xlsx'; use mteb, csv or trec"),
        (lambda d: harness.agreement([d], scale="3-0"), "scale"),
    ],
    ids=[
        "convert-keyword",
        "convert-column-role",
        "bench-keyword",
        "report-page-keyword",
        "export-format",
        "agreement-scale",
    ],
)
def test_a_wrong_argument_is_one_line_naming_it_and_writes_nothing(call, message, tmp_path):
    (tmp_path / "j.csv").write_text("qid,doc,grade\nq1,d1,1\n", encoding="utf-8")
    with pytest.raises(HarnessError) as caught:
        call(tmp_path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.csv"]


def test_check_published_sets_the_stored_score_against_the_registrys(tiny_beir, tmp_path, monkeypatch):
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    harness.evaluate(tiny_beir, model="bm25", output_dir=tmp_path / "results", dataset_name="scifact")
    (stored,) = _stored(tmp_path / "results").values()
    (check,) = harness.check_published(tmp_path / "results", "ndcg_cut_10")
    # 0.6789: BM25 on SciFact in Pyserini's BEIR table (harness/data), the tiny set's score far from it
    assert (check.ours, check.published, check.status) == (stored["metrics"]["nDCG@10"], 0.6789, "OFF")
    with pytest.raises(HarnessError, match="no result records its bytes per document"):
        harness.compression(tmp_path / "results")


def test_cache_entries_and_clear_cache_see_the_files_on_disk(tiny_beir, tmp_path):
    import platform

    harness.evaluate(tiny_beir, model="hash:64", output_dir=None, cache_dir=tmp_path / "cache")
    on_disk = sorted(p.name for p in (tmp_path / "cache" / "embeddings").iterdir())
    entries = harness.cache_entries(tmp_path / "cache")
    assert sorted(e["key"] for e in entries) == on_disk and {e["kind"] for e in entries} == {"corpus", "queries"}
    with pytest.raises(HarnessError, match="tiny"):  # a filter matching nothing names what the cache holds
        harness.clear_cache(tmp_path / "cache", dataset="nfcorpus")
    assert len(harness.clear_cache(tmp_path / "cache", model="hash:64", dry_run=True)) == 2 and len(on_disk) == 2
    assert len(harness.clear_cache(tmp_path / "cache", dataset="tiny")) == 2
    assert not list((tmp_path / "cache" / "embeddings").iterdir())
    assert harness.environment(cache_dir=tmp_path / "cache")["host"]["machine"] == platform.machine()


def test_convert_takes_the_excel_helpers_options_from_python(tmp_path):
    (tmp_path / "d.csv").write_text("id;text\nA;red shoes\nB;blue coat\n", encoding="utf-8")
    (tmp_path / "q.csv").write_text("id;text\nq1;red shoes\n", encoding="utf-8")
    (tmp_path / "j.csv").write_text("qid;doc_id;grade\nq1;A;2,0\nq1;B;7\n", encoding="utf-8")
    tables = [tmp_path / name for name in ("d.csv", "q.csv", "j.csv")]
    with pytest.raises(HarnessError, match=r"j\.csv.*:3.*7"):  # 7 off the 0-3 scale, named by its line
        harness.convert(tmp_path / "set", *tables, grade_scale="0-3")
    assert not (tmp_path / "set").exists()
    summary = harness.convert(tmp_path / "set", *tables, grade_scale=(0, 7), decimal_comma=True)
    written = (tmp_path / "set" / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    assert written[1:] == ["q1\tA\t2", "q1\tB\t7"] and summary.n_judgments == 2
