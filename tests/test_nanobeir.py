"""NanoBEIR: the registry, downloads from a loopback server (synthetic parquet files under a test registry),
offline import, bench's mean row, and the bad inputs."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from cli_runner import invoke

from harness.datasets import nanobeir, registry
from harness.datasets.catalog import read_stamp
from harness.datasets.registry import NanoFile
from harness.datasets.validate import validate_folder
from harness.errors import ChecksumMismatchError, DatasetError, FormatError
from harness.io.trec import read_qrels

REPOS = {"scifact": "NanoSciFact", "arguana": "NanoArguAna"}
PATHS = {"docs": "corpus", "queries": "queries", "qrels": "qrels"}


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def _tables(name: str, n_docs: int = 40, n_queries: int = 6) -> dict[str, bytes]:
    docs = [{"_id": f"{name}-d{i}", "text": f"document {i} about {name} topic{i % 5}"} for i in range(n_docs)]
    queries = [{"_id": f"{name}-q{i}", "text": f"what about topic{i % 5}"} for i in range(n_queries)]
    qrels = [
        {"query-id": f"{name}-q{i}", "corpus-id": f"{name}-d{i * 5 + j}"} for i in range(n_queries) for j in (0, 1)
    ]
    return {"docs": _parquet(docs), "queries": _parquet(queries), "qrels": _parquet(qrels)}


@pytest.fixture
def nano(http_server, monkeypatch):
    """A two-dataset NanoBEIR registry whose files the loopback server serves."""
    served = {name: _tables(name) for name in REPOS}
    files = {}
    for name, tables in served.items():
        files[name] = {}
        for table, data in tables.items():
            path = f"/zeta-alpha-ai/{REPOS[name]}/resolve/main/{PATHS[table]}/train-00000-of-00001.parquet"
            http_server.files[path] = data
            rows = {"docs": 40, "queries": 6, "qrels": 12}[table]
            files[name][table] = NanoFile(f"https://huggingface.co/datasets{path}", hashlib.md5(data).hexdigest(), rows)
    monkeypatch.setattr(registry, "nanobeir_files", lambda: files)
    registry.nanobeir.cache_clear()
    yield http_server, served
    monkeypatch.undo()
    registry.nanobeir.cache_clear()


def test_the_shipped_registry_is_valid():
    files = registry.nanobeir_files()
    assert sorted(files) == sorted(
        [
            "arguana",
            "climate-fever",
            "dbpedia-entity",
            "fever",
            "fiqa",
            "hotpotqa",
            "msmarco",
            "nfcorpus",
            "nq",
            "quora",
            "scidocs",
            "scifact",
            "webis-touche2020",
        ]
    )
    for name, tables in files.items():
        assert set(tables) == {"docs", "queries", "qrels"}
        for file in tables.values():
            assert file.url.startswith("https://huggingface.co/datasets/zeta-alpha-ai/Nano") and len(file.md5) == 32
            assert file.rows > 0 and file.path.endswith(".parquet")
        spec = registry.lookup(f"nanobeir/{name}")
        assert spec.family == "NanoBEIR" and spec.n_queries <= 50 and 2000 <= spec.n_docs <= 7000
        assert spec.ignore_identical_ids == registry.get(name).ignore_identical_ids  # as the full dataset
    assert registry.get("nanobeir").subsets == tuple(files)
    assert registry.mteb_task("nanobeir/scifact") == "NanoSciFactRetrieval"


def test_download_converts_verifies_and_stamps(nano, tmp_path):
    server, _ = nano
    installed = nanobeir.download("nanobeir/scifact", tmp_path / "data", base_url=server.url, progress=False)
    folder = tmp_path / "data" / "nanobeir" / "scifact"
    assert installed.path == folder and validate_folder(folder).ok
    stamp = read_stamp(folder)
    assert stamp["grades"] == nanobeir.GRADE_NOTE and (stamp["n_docs"], stamp["n_queries"], stamp["n_judgments"]) == (
        40,
        6,
        12,
    )
    assert set(read_qrels(folder / "qrels" / "test.tsv").to_dict()["scifact-q1"].values()) == {1}
    requests = len(server.requests)
    nanobeir.download("nanobeir/scifact", tmp_path / "data", base_url=server.url, progress=False)
    assert len(server.requests) == requests  # installed: nothing fetched again
    assert not list((tmp_path / "data" / "nanobeir").glob(".*"))  # no staging or part files left


def test_all_thirteen_by_one_name_and_a_bench_with_their_mean(nano, tmp_path, monkeypatch):
    server, _ = nano
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    data = str(tmp_path / "data")
    result = invoke(["datasets", "download", "nanobeir", "--data-dir", data, "--base-url", server.url])
    assert result.exit_code == 0, result.output
    listed = invoke(["datasets", "list", "--data-dir", data, "--json"])
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["nanobeir/scifact"]["installed"] and rows["nanobeir/arguana"]["family"] == "NanoBEIR"
    out = tmp_path / "results"
    bench = invoke(
        [
            "bench",
            "--models",
            "hash:64",
            "--datasets",
            "nanobeir",
            "--data-dir",
            data,
            "--no-download",
            "--output-dir",
            str(out),
            "-q",
        ],
    )
    assert bench.exit_code == 0, bench.output
    values = {line.split()[0]: float(line.split()[-1]) for line in bench.stdout.splitlines()[1:3]}
    mean_line = next(line for line in bench.stdout.splitlines() if line.startswith("NanoBEIR (mean of 2)"))
    assert float(mean_line.split()[-1]) == pytest.approx(sum(values.values()) / 2, abs=1e-4)
    report = invoke(["report", str(out)])
    assert "| NanoBEIR (mean of 2) |" in report.stdout and "average over 2 datasets" in report.stdout


def test_import_from_a_folder_for_an_offline_machine(nano, tmp_path, monkeypatch):
    _, served = nano
    source = tmp_path / "downloaded"
    for table, data in served["arguana"].items():
        (source / PATHS[table]).mkdir(parents=True)
        (source / PATHS[table] / "train-00000-of-00001.parquet").write_bytes(data)
    data_dir = tmp_path / "data"
    result = invoke(["datasets", "import", str(source), "--name", "nanobeir/arguana", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    evaluated = invoke(
        [
            "evaluate",
            "nanobeir/arguana",
            "--data-dir",
            str(data_dir),
            "--no-download",
            "--model",
            "hash:64",
            "--output-dir",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    record = json.loads(evaluated.stdout)
    assert record["dataset"] == "nanobeir/arguana" and record["config"]["ignore_identical_ids"] is True


def test_offline_download_fails_fast_naming_the_way_out(nano, tmp_path):
    result = invoke(
        [
            "datasets",
            "download",
            "nanobeir/scifact",
            "--data-dir",
            str(tmp_path / "d"),
            "--base-url",
            "http://127.0.0.1:9",
        ],
    )
    error = result.stderr.strip().splitlines()[-1]  # after the progress bar's line
    assert result.exit_code == 1 and error.startswith("Error: http://127.0.0.1:9/zeta-alpha-ai/NanoSciFact/")
    assert "datasets import FOLDER --name nanobeir/NAME" in error and "--base-url" in error
    assert not (tmp_path / "d" / "nanobeir" / "scifact").exists()


def test_an_unknown_name_suggests(nano):
    with pytest.raises(DatasetError, match="did you mean nanobeir/scifact"):
        nanobeir.subset_name("nanobeir/scifcat")


# --------------------------------------------------------------------------- bad input


def _serve(server, name: str, table: str, data: bytes, monkeypatch, rows: int | None = None) -> None:
    """Serve other bytes for one file, with a registry entry that matches them (md5, rows)."""
    files = registry.nanobeir_files()
    old = files[name][table]
    server.files[old.url.removeprefix("https://huggingface.co/datasets")] = data
    files[name][table] = NanoFile(old.url, hashlib.md5(data).hexdigest(), rows if rows is not None else old.rows)


def test_unexpected_columns_are_named(nano, tmp_path, monkeypatch):
    server, _ = nano
    _serve(
        server, "scifact", "qrels", _parquet([{"qid": "scifact-q0", "docid": "scifact-d0", "label": 1}]), monkeypatch
    )
    with pytest.raises(
        FormatError,
        match="unexpected columns for NanoBEIR qrels: found docid, label, qid; expected corpus-id, query-id",
    ):
        nanobeir.download("nanobeir/scifact", tmp_path / "data", base_url=server.url, progress=False)
    assert read_stamp(tmp_path / "data" / "nanobeir" / "scifact") is None


def test_a_truncated_file_is_refused_by_md5_and_by_the_parquet_reader(nano, tmp_path, monkeypatch):
    server, served = nano
    files = registry.nanobeir_files()
    docs = files["scifact"]["docs"]
    server.files[docs.url.removeprefix("https://huggingface.co/datasets")] = served["scifact"]["docs"][:300]
    with pytest.raises(ChecksumMismatchError, match="md5 mismatch"):
        nanobeir.download("nanobeir/scifact", tmp_path / "data", base_url=server.url, progress=False)
    _serve(server, "scifact", "docs", served["scifact"]["docs"][:300], monkeypatch)  # the registry agrees with it
    with pytest.raises(FormatError, match="not a readable parquet file"):
        nanobeir.download("nanobeir/scifact", tmp_path / "data", base_url=server.url, progress=False)
    assert read_stamp(tmp_path / "data" / "nanobeir" / "scifact") is None


def test_a_judgment_naming_an_absent_document_is_refused(nano, tmp_path, monkeypatch):
    server, _ = nano
    qrels = [{"query-id": f"scifact-q{i}", "corpus-id": f"scifact-d{i}"} for i in range(6)]
    qrels += [{"query-id": "scifact-q0", "corpus-id": f"scifact-d{j}"} for j in range(6, 11)]
    qrels.append({"query-id": "scifact-q1", "corpus-id": "scifact-d999"})
    _serve(server, "scifact", "qrels", _parquet(qrels), monkeypatch)
    result = invoke(
        ["datasets", "download", "nanobeir/scifact", "--data-dir", str(tmp_path / "d"), "--base-url", server.url]
    )
    assert result.exit_code == 1 and "1 judgment(s) name unknown documents: row 12 'scifact-d999'" in result.stderr
    assert read_stamp(tmp_path / "d" / "nanobeir" / "scifact") is None


def test_mteb_export_uses_mtebs_split_name_and_reads_back(nano, tmp_path, monkeypatch):
    import mteb

    from harness.datasets.published import from_mteb_folder
    from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

    server, _ = nano
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    nanobeir.download("nanobeir/scifact", tmp_path / "data", base_url=server.url, progress=False)
    evaluate_dataset(
        EvaluateConfig(
            "nanobeir/scifact",
            model="hash:64",
            data_dir=tmp_path / "data",
            download=False,
            output_dir=tmp_path / "out",
            progress=False,
        )
    )
    result = invoke(["export", str(tmp_path / "out"), "--format", "mteb", "--out", str(tmp_path / "mteb")])
    assert result.exit_code == 0, result.output
    task_file = next((tmp_path / "mteb").rglob("NanoSciFactRetrieval.json"))
    splits = list(json.loads(task_file.read_text())["scores"])
    assert splits == ["train"] and splits == list(mteb.get_task("NanoSciFactRetrieval").metadata.eval_splits)
    rows = from_mteb_folder(tmp_path / "mteb")
    assert [(row.dataset, row.split) for row in rows] == [("nanobeir/scifact", "test")]
