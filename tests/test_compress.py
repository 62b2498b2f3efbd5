"""Matryoshka truncation and int8/binary embeddings: against numpy and sentence-transformers references, through the
pipeline (derived from cached vectors, never a new entry), bench axes, the report, and the bad inputs."""

from __future__ import annotations

import heapq
import json
import logging

import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.retrieval import compress
from harness.retrieval.compress import Calibration, CompressedIndex, CompressionSpec, compression_grid, quantize


def _trec_top(scores: dict[str, float], depth: int) -> list[tuple[str, float]]:
    """The trec_eval order (score, then doc_id, descending), first `depth`."""
    return [(doc_id, score) for score, doc_id in heapq.nlargest(depth, ((s, d) for d, s in scores.items()))]


def _ranked(run, query_id: str) -> list[tuple[str, float]]:
    return [(hit.doc_id, hit.score) for hit in run[query_id]]


@pytest.fixture
def vectors():
    rng = np.random.default_rng(7)
    corpus = rng.normal(size=(300, 32)).astype(np.float32)
    queries = (3 * rng.normal(size=(12, 32))).astype(np.float32)  # wider than the corpus: clipping matters
    doc_ids = [f"d{i:03d}" for i in rng.permutation(300)]
    return corpus, queries, doc_ids


def _index(spec: CompressionSpec, corpus, doc_ids, chunks: int = 3, calibration_file=None) -> CompressedIndex:
    index = CompressedIndex(corpus.shape[1], spec, calibration_file)
    for part_ids, part in zip(np.array_split(np.array(doc_ids), chunks), np.array_split(corpus, chunks)):
        index.add(list(part_ids), part)
    return index


def test_truncation_is_slicing_then_renormalizing(vectors):
    corpus, _, _ = vectors
    spec = CompressionSpec(truncate_dim=8)
    sliced = corpus[:, :8]
    np.testing.assert_allclose(
        spec.prepare(corpus, normalize=True), sliced / np.linalg.norm(sliced, axis=1, keepdims=True), rtol=1e-6
    )
    np.testing.assert_array_equal(spec.prepare(corpus, normalize=False), sliced)
    assert CompressionSpec().prepare(corpus, True) is corpus
    assert CompressionSpec(32).effective(32) == CompressionSpec() and CompressionSpec(8).effective(32).truncate_dim == 8


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_quantization_matches_sentence_transformers(vectors, precision):
    from sentence_transformers.util.quantization import quantize_embeddings

    corpus, queries, _ = vectors
    ranges = Calibration.of([corpus]).ranges
    for data in (corpus, queries):
        expected = quantize_embeddings(data, precision=precision, ranges=ranges)
        assert quantize(data, precision, ranges).dtype == expected.dtype
        np.testing.assert_array_equal(quantize(data, precision, ranges), expected)


_NUMBERS = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 1e-8, -1e-8, 3.0, -3.0, 0.1, 255.0, 1 / 3])


@settings(derandomize=True, deadline=None, max_examples=60)
@given(st.integers(1, 19), st.integers(1, 6), st.data())
def test_our_quantize_is_sentence_transformers_quantize_embeddings_bit_for_bit(dimension, rows, data):
    """Ours, not a call to theirs (importing it imports torch: docs/dependencies.md), pinned to theirs on inputs
    where the formulas could part: values on a range's ends, constant dimensions (max = min), queries outside the
    corpus's ranges (clipping), zeros of both signs (the binary cut), dimensions that are no multiple of 8."""
    from sentence_transformers.util.quantization import quantize_embeddings

    matrix = st.lists(st.lists(_NUMBERS, min_size=dimension, max_size=dimension), min_size=rows, max_size=rows)
    corpus = np.array(data.draw(matrix), dtype=np.float32)
    queries = np.array(data.draw(matrix), dtype=np.float32) * np.float32(data.draw(st.sampled_from([1, 2, -4])))
    ranges = Calibration.of([corpus]).ranges
    for precision in ("int8", "uint8", "binary", "ubinary"):
        for vectors in (corpus, queries):
            expected = quantize_embeddings(vectors, precision=precision, ranges=ranges)
            got = quantize(vectors, precision, ranges)
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)


def test_queries_are_quantized_with_the_corpus_ranges(vectors, monkeypatch):
    corpus, queries, doc_ids = vectors
    seen = []
    original = Calibration.of.__func__

    def spy(cls, chunks):
        chunks = list(chunks)
        seen.append(sum(len(chunk) for chunk in chunks))
        return original(cls, chunks)

    monkeypatch.setattr(Calibration, "of", classmethod(spy))
    index = _index(CompressionSpec(embedding_precision="int8"), corpus, doc_ids)
    codes = index.query_codes(queries)
    assert seen == [len(corpus)]  # calibrated once, on every corpus vector and nothing else
    corpus_ranges = np.vstack([corpus.min(axis=0), corpus.max(axis=0)])
    np.testing.assert_array_equal(index.calibration.ranges, corpus_ranges)
    np.testing.assert_array_equal(codes, quantize(queries, "int8", corpus_ranges).astype(np.float32))
    own = quantize(queries, "int8", np.vstack([queries.min(axis=0), queries.max(axis=0)]))
    assert not np.array_equal(codes, own.astype(np.float32))
    assert codes.min() == -128 and codes.max() == 127  # queries beyond the corpus range are clipped


@pytest.mark.parametrize("precision", ["binary", "ubinary"])
def test_binary_ranking_equals_packbits_popcount_with_the_trec_eval_tie_rule(vectors, precision):
    corpus, queries, doc_ids = vectors
    corpus, queries = corpus[:, :16], queries[:, :16]  # 16 bits: many ties at every cut
    index = _index(CompressionSpec(embedding_precision=precision, rescore_multiplier=0), corpus, doc_ids)
    run = index.search([f"q{i}" for i in range(len(queries))], queries, depth=25)
    packed_docs, packed_queries = np.packbits(corpus > 0, axis=1), np.packbits(queries > 0, axis=1)
    for i, query in enumerate(packed_queries):
        hamming = np.unpackbits(np.bitwise_xor(packed_docs, query), axis=1).sum(axis=1)
        reference = _trec_top({doc_id: float(16 - h) for doc_id, h in zip(doc_ids, hamming)}, 25)
        assert _ranked(run, f"q{i}") == reference


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_int8_ranking_equals_the_integer_inner_product(vectors, precision):
    corpus, queries, doc_ids = vectors
    index = _index(CompressionSpec(embedding_precision=precision, rescore_multiplier=0), corpus, doc_ids)
    run = index.search([f"q{i}" for i in range(len(queries))], queries, depth=20)
    ranges = Calibration.of([corpus]).ranges
    products = (
        quantize(queries, precision, ranges).astype(np.int64) @ quantize(corpus, precision, ranges).astype(np.int64).T
    )
    for i, row in enumerate(products):
        assert _ranked(run, f"q{i}") == _trec_top(dict(zip(doc_ids, map(float, row))), 20)


def test_rescoring_orders_the_candidates_by_their_float32_scores(vectors):
    corpus, queries, doc_ids = vectors
    index = _index(CompressionSpec(embedding_precision="int8", rescore_multiplier=3), corpus, doc_ids)
    run = index.search([f"q{i}" for i in range(len(queries))], queries, depth=10)
    ranges = Calibration.of([corpus]).ranges
    products = quantize(queries, "int8", ranges).astype(np.int64) @ quantize(corpus, "int8", ranges).astype(np.int64).T
    exact = queries @ corpus.T
    for i in range(len(queries)):
        candidates = set(np.argsort(-products[i], kind="stable")[:30].tolist())
        reference = _trec_top({doc_ids[j]: float(exact[i, j]) for j in candidates}, 10)
        got = _ranked(run, f"q{i}")
        assert [d for d, _ in got] == [d for d, _ in reference]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in reference], rtol=1e-5)


def test_the_calibration_is_stored_reused_and_recomputed_when_damaged(vectors, tmp_path, caplog, monkeypatch):
    corpus, queries, doc_ids = vectors
    path = tmp_path / "ranges.npz"
    spec = CompressionSpec(embedding_precision="int8")
    first = _index(spec, corpus, doc_ids, calibration_file=path)
    first.build()
    assert path.is_file()
    computed = []
    original = Calibration.of.__func__
    monkeypatch.setattr(Calibration, "of", classmethod(lambda cls, chunks: computed.append(1) or original(cls, chunks)))
    second = _index(spec, corpus, doc_ids, calibration_file=path)
    second.build()
    assert computed == [] and np.array_equal(second.calibration.ranges, first.calibration.ranges)
    path.write_bytes(path.read_bytes()[:100])  # a torn file
    with caplog.at_level(logging.WARNING):
        third = _index(spec, corpus, doc_ids, calibration_file=path)
        third.build()
    assert computed == [1] and "damaged int8 calibration" in caplog.text
    assert Calibration.load(path, corpus.shape[1]) is not None  # rewritten whole


def test_compression_grid():
    grid = compression_grid(CompressionSpec(), [64, 32], ["float32", "binary"], [0, 2])
    assert [spec.label() for spec in grid] == [
        "dim64",
        "dim64 binary no-rescore",
        "dim64 binary rescore2",
        "dim32",
        "dim32 binary no-rescore",
        "dim32 binary rescore2",
    ]
    with pytest.raises(HarnessError, match="`truncate_dim` 0 must be positive"):
        compression_grid(CompressionSpec(), [0])


# --------------------------------------------------------------------------- through the pipeline


def _evaluate(tiny_beir, cache, **changes):
    config = EvaluateConfig(
        tiny_beir, model="hash:64", output_dir=None, progress=False, cache_dir=cache, k_values=(1, 3), **changes
    )
    return evaluate_dataset(config).result


def _entries(cache):
    return sorted(p.name for p in (cache / "embeddings").iterdir())


def test_full_dimension_float32_is_todays_result_and_variants_add_no_cache_entry(tiny_beir, tmp_path):
    cache = tmp_path / "cache"
    today = _evaluate(tiny_beir, cache)
    entries = _entries(cache)
    full = _evaluate(tiny_beir, cache, compression=CompressionSpec(truncate_dim=64))
    assert (full.metrics, full.config_hash, full.variant, full.label) == (
        today.metrics,
        today.config_hash,
        "",
        "hash:64",
    )
    assert today.config["dimension"] == 64 and today.config["bytes_per_doc"] > 64 * 4
    for spec in (CompressionSpec(32), CompressionSpec(32, "int8"), CompressionSpec(None, "binary", 0)):
        result = _evaluate(tiny_beir, cache, compression=spec)
        assert result.config_hash != today.config_hash and result.config["embedding_cache"] == "hit"
    assert _entries(cache) == entries  # derived from the cached vectors: no new entry
    binary = _evaluate(tiny_beir, cache, compression=CompressionSpec(32, "binary"))
    assert binary.label == "hash:64 [dim32 binary rescore2]"
    assert (binary.config["dimension"], binary.config["embedding_precision"]) == (32, "binary")
    assert binary.config["compressed_index"] == "IndexBinaryFlat (Hamming)"
    assert binary.config["rescore"] == "float32 query · float32 document vectors"
    assert 4 <= binary.config["bytes_per_doc"] < 64 * 4
    int8 = _evaluate(tiny_beir, cache, compression=CompressionSpec(None, "int8"))
    assert int8.config["calibration"] == "per-dimension min/max over all 5 corpus vectors"
    assert list(int8.index_quality) == ["recall_of_exact@5"]  # 5 documents: the cut is the corpus


def test_bench_axes_and_the_compression_report(tiny_beir, tmp_path, monkeypatch):
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "results"
    args = [
        "bench",
        "--models",
        "hash:64,bm25",
        "--datasets",
        str(tiny_beir),
        "--output-dir",
        str(out),
        "-q",
        "--truncate-dims",
        "64,32",
        "--embedding-precisions",
        "float32,binary",
        "--rescore-multipliers",
        "0,2",
    ]
    first = invoke(args)
    assert first.exit_code == 0, first.output
    assert "7 cells: 7 done" in first.stdout and "hash:64 [dim32 binary no-rescore]" in first.stdout
    again = invoke(args)
    assert "7 cells: 0 done, 7 skipped" in again.stdout  # the full-dimension cell is today's result
    result = invoke(
        [
            "report",
            str(out),
            "--compression",
            "--metric",
            "nDCG@3",
            "--format",
            "json",
            "--plot",
            str(tmp_path / "c.png"),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert len(rows) == 6 and {row["model"] for row in rows} == {"hash:64"}
    full = next(row for row in rows if row["dimension"] == 64 and row["precision"] == "float32")
    assert full["retained"] == pytest.approx(100.0)
    assert [row["bytes_per_doc"] for row in rows] == sorted((row["bytes_per_doc"] for row in rows), reverse=True)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


BAD = [
    ("truncate-dim-zero", ["--truncate-dim", "0"], "--truncate-dim 0 must be positive"),
    ("truncate-dim-above-the-model", ["--truncate-dim", "65"], "--truncate-dim 65 exceeds the model's dimension 64"),
    (
        "binary-not-a-multiple-of-8",
        ["--truncate-dim", "12", "--embedding-precision", "binary"],
        "packs 8 dimensions a byte, and 12 is not a multiple of 8 (choose --truncate-dim 8)",
    ),
    (
        "precision-with-bm25",
        ["--model", "bm25", "--embedding-precision", "int8"],
        "--embedding-precision applies to a dense model's vectors; BM25 has none (drop it)",
    ),
    (
        "precision-with-an-approximate-index",
        ["--embedding-precision", "int8", "--index", "hnsw"],
        "--embedding-precision int8 searches its own exact compressed index; --index hnsw does not combine with it",
    ),
    (
        "negative-rescore-multiplier",
        ["--embedding-precision", "int8", "--rescore-multiplier", "-1"],
        "--rescore-multiplier -1 must be 0 (no rescoring) or more",
    ),
]


@pytest.mark.parametrize(("case", "args", "message"), BAD, ids=[case for case, *_ in BAD])
def test_bad_compression_settings_are_one_line(tiny_beir, tmp_path, monkeypatch, case, args, message):
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    result = invoke(["evaluate", str(tiny_beir), "--model", "hash:64", *args, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--embedding-precisions", "float32,int9", "unknown precision 'int9'"),
        ("--truncate-dims", "384,x", "'x' is not an integer"),
    ],
)
def test_bad_bench_axes_are_usage_errors(tiny_beir, option, value, message):
    result = invoke(["bench", "--models", "hash:64", "--datasets", str(tiny_beir), option, value])
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_module_docstring_names_what_is_used():
    for name in ("IndexScalarQuantizer", "QT_8bit_direct_signed", "IndexBinaryFlat", "corpus"):
        assert name in compress.__doc__
