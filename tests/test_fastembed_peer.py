"""fastembed beside ours (`benchmarks/suite.py`, `benchmarks/_peers.py`): the model folder the suite hands fastembed
gives sentence-transformers' own vectors (mean pooling, normalized), its vectors are scored as a brute-force ranking
and pytrec_eval score them, a pooling or normalization unlike the model's stops the step before the corpus is
encoded, and without fastembed the suite prints one line in place of its figures. The tests that run fastembed
skip where it is not installed (the ``[peers]`` extra, not in CI: docs/dependencies.md)."""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TEXTS = [
    "Wireless earbuds with noise cancellation",
    "a budget laptop for students",
    "Over-ear headphones built for long flights, with active noise cancelling and a long battery life " * 8,
    "what helps me sleep on a plane?",
]


@pytest.fixture
def peers(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("_peers")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The default model, and the folder `write_model_folder` makes of it for fastembed."""
    pytest.importorskip("fastembed")
    import sys

    from sentence_transformers import SentenceTransformer

    from harness.retrieval.models import DEFAULT_MODEL, resolve_model_source

    sys.path.insert(0, str(BENCHMARKS))
    try:
        peers = importlib.import_module("_peers")
    finally:
        sys.path.remove(str(BENCHMARKS))
    source = Path(resolve_model_source(DEFAULT_MODEL))
    model = SentenceTransformer(str(source), device="cpu")
    folder = tmp_path_factory.mktemp("fastembed") / "model"
    peers.write_model_folder(model, source, folder)
    return model, source, folder


def _cosines_and_norms(vectors, reference):
    """Row by row, in plain Python: each pair's cosine, and each vector's length beside the reference's."""
    rows = []
    for v, r in zip(np.asarray(vectors, dtype=float).tolist(), np.asarray(reference, dtype=float).tolist()):
        dot = sum(a * b for a, b in zip(v, r))
        norm, reference_norm = sum(a * a for a in v) ** 0.5, sum(b * b for b in r) ** 0.5
        rows.append((dot / (norm * reference_norm), norm, reference_norm))
    return rows


def test_fastembed_gives_the_models_own_vectors(exported, peers, tmp_path):
    model, _, folder = exported
    embedder = peers.load_fastembed(folder, tmp_path / "cache")
    reference = model.encode(TEXTS, convert_to_numpy=True)  # sentence-transformers' own modules: mean, Normalize
    for vectors in (list(embedder.embed(TEXTS)), list(embedder.query_embed(TEXTS))):
        for cosine, norm, reference_norm in _cosines_and_norms(vectors, reference):
            assert cosine >= 0.999
            assert abs(norm - reference_norm) <= 1e-3


def test_the_settings_are_the_models_own_files(exported):
    _, source, folder = exported
    pooling = json.loads((source / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    modules = [m["type"] for m in json.loads((source / "modules.json").read_text(encoding="utf-8"))]
    settings = json.loads((folder / "settings.json").read_text(encoding="utf-8"))
    expected_pooling = "mean" if pooling.get("pooling_mode_mean_tokens") else "cls"
    assert settings == {
        "pooling": expected_pooling,
        "normalize": any(kind.endswith("Normalize") for kind in modules),
        "dim": pooling["word_embedding_dimension"],
    }
    for name in ("tokenizer.json", "tokenizer_config.json"):  # as the model ships them, not re-saved
        assert (folder / name).read_bytes() == (source / name).read_bytes()
    assert (folder / "onnx" / "model.onnx").is_file()  # fastembed's default model_file


def test_the_vectors_are_scored_as_pytrec_eval_scores_a_brute_force_ranking(peers):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    folder = Path(__file__).resolve().parents[1] / "harness" / "data" / "demo"
    doc_ids, texts, queries, qrels, name = peers.read_dataset(str(folder))
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(doc_ids), 8)).astype(np.float32)
    query_vectors = rng.standard_normal((len(queries), 8)).astype(np.float32)
    run = {}
    for (query_id, _), q in zip(queries, query_vectors.tolist()):
        scores = {d: sum(a * b for a, b in zip(q, v)) for d, v in zip(doc_ids, vectors.tolist())}
        run[query_id] = dict(sorted(scores.items(), key=lambda item: -item[1])[:100])
    judged = {q: dict(qrels[q]) for q in qrels}
    per_query = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10"}).evaluate(run)
    expected = sum(values["ndcg_cut_10"] for values in per_query.values()) / len(judged)
    assert peers.score(doc_ids, vectors, queries, query_vectors, qrels, name) == pytest.approx(expected, abs=1e-6)


class _Embedder:
    """fastembed's interface (``embed``) over fixed vectors, counting the texts it is given."""

    def __init__(self, vectors):
        self.vectors, self.texts = vectors, 0

    def embed(self, texts):
        self.texts += len(texts)
        return iter(self.vectors[: len(texts)])


@pytest.mark.parametrize("bug, needs", [("unnormalized", "largest norm gap"), ("other-pooling", "min cosine")])
def test_a_pooling_or_normalization_unlike_the_models_stops_the_step_before_the_corpus(
    peers, tmp_path, monkeypatch, bug, needs
):
    rng = np.random.default_rng(1)
    reference = rng.standard_normal((3, 16))
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    np.save(tmp_path / "reference.npy", reference)
    (tmp_path / "checks.json").write_text(json.dumps(["a", "b", "c"]), encoding="utf-8")
    wrong = _Embedder(reference * 3.0 if bug == "unnormalized" else np.roll(reference, 1, axis=1))
    monkeypatch.setattr(peers, "load_fastembed", lambda model_dir, cache_dir: wrong)
    demo = Path(__file__).resolve().parents[1] / "harness" / "data" / "demo"
    with pytest.raises(SystemExit) as stopped:
        peers.run_fastembed(str(demo), str(tmp_path), str(tmp_path / "cache"))
    message = str(stopped.value)
    assert message.startswith(f"{tmp_path}: fastembed's vectors differ from sentence-transformers' own on 3 texts")
    assert needs in message and message.endswith("its pooling or normalization is not the model's; fix settings.json")
    assert wrong.texts == 3  # the check texts only: not one corpus text was encoded
    assert peers.check_agreement(_Embedder(reference.copy()), tmp_path)["min_cosine"] >= 0.999


def test_without_fastembed_the_suite_prints_one_line_and_runs_no_step(peers, monkeypatch):
    suite = importlib.import_module("suite")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "fastembed" else real_find_spec(name, *a)
    )
    monkeypatch.setattr(suite, "child", lambda *args: pytest.fail("a step ran without fastembed"))
    result, line = suite.fastembed_step("unused")
    assert result is None and suite.fastembed_rows(None, {}, {}) == ([], [])
    assert line == "fastembed: skipped (not installed: pip install 'beir-harness[peers]', docs/dependencies.md)"


def test_max_tokens_makes_fastembed_truncate_where_sentence_transformers_does(exported, peers, tmp_path, monkeypatch):
    """`--fastembed-max-tokens 256` (like for like): a text longer than 256 tokens gets sentence-transformers' vector,
    which its default (the tokenizer's 512) does not give."""
    model, source, folder = exported
    long_text = TEXTS[2] * 2  # about 340 tokens
    assert len(model.tokenizer(long_text)["input_ids"]) > model.max_seq_length == 256
    reference = model.encode([long_text], convert_to_numpy=True)
    monkeypatch.setenv("SUITE_FASTEMBED_MAX_TOKENS", str(model.max_seq_length))
    peers.write_model_folder(model, source, tmp_path / "model")
    cosines = {}
    for name, where in (("default", folder), ("256", tmp_path / "model")):
        vectors = list(peers.load_fastembed(where, tmp_path / f"cache-{name}").embed([long_text]))
        cosines[name] = _cosines_and_norms(vectors, reference)[0][0]
    assert cosines["256"] >= 0.999 > cosines["default"]
