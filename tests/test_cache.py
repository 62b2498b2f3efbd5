"""The embedding cache: warm reruns, content addressing, resume after a crash, damage, unwritable dirs."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke
from conftest import FakeEncoder

import harness.pipeline.evaluate
import harness.retrieval.encode
from harness.io.cache import clear_entries, embedding_entry, list_entries
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset


class CachingFake(FakeEncoder):
    """The fake encoder with an identity, so the pipeline caches its vectors."""

    def __init__(self, version: str = "v1"):
        super().__init__()
        self.version = version

    def fingerprint(self):
        return {"name": self.name, "version": self.version, "dimension": self.dimension}


def _run(folder, tmp_path, encoder, **overrides):
    options = {
        "dataset_path": folder,
        "output_dir": None,
        "progress": False,
        "cache_dir": tmp_path / "cache",
        "k_values": (1, 10),
    }
    options.update(overrides)
    return evaluate_dataset(EvaluateConfig(**options), encoder=encoder)


def _without_texts(tmp_path) -> None:
    """Remove the vectors cached by text (`harness.io.cache.texts`), so the corpus and query entries are all there is."""
    shutil.rmtree(tmp_path / "cache" / "texts")


def _docs_encoded(encoder) -> int:
    return sum(len(batch) for batch in encoder.doc_batches)


def test_warm_rerun_encodes_nothing_and_scores_the_same(tiny_beir, tmp_path):
    cold_encoder, warm_encoder = CachingFake(), CachingFake()
    cold = _run(tiny_beir, tmp_path, cold_encoder)
    warm = _run(tiny_beir, tmp_path, warm_encoder)
    assert _docs_encoded(cold_encoder) == 5 and cold.result.config["embedding_cache"] == "stored"
    assert _docs_encoded(warm_encoder) == 0 and warm_encoder.query_texts == []
    assert warm.result.config["embedding_cache"] == "hit"
    assert warm.result.metrics == cold.result.metrics and warm.run == cold.run
    assert warm.result.fingerprints == cold.result.fingerprints
    assert warm.result.config["n_docs"] == 5


def test_changed_corpus_or_model_never_hits_a_stale_entry(tiny_beir, tmp_path):
    _run(tiny_beir, tmp_path, CachingFake())
    other_model = CachingFake("v2")
    _run(tiny_beir, tmp_path, other_model)
    assert _docs_encoded(other_model) == 5 and len(other_model.query_texts) == 3  # the judged queries
    same_again = CachingFake("v1")  # the first key again: its entry is still there, nothing is encoded
    _run(tiny_beir, tmp_path, same_again)
    assert _docs_encoded(same_again) == 0 and same_again.query_texts == []
    with open(tiny_beir / "corpus.jsonl", "a") as handle:
        handle.write('{"_id": "d6", "text": "new document"}\n')
    changed = CachingFake()
    outcome = _run(tiny_beir, tmp_path, changed)
    # The new corpus entry is built from the vectors cached by text: only the added document is encoded.
    assert _docs_encoded(changed) == 1 and outcome.result.config["n_docs"] == 6
    assert len([e for e in list_entries(tmp_path / "cache") if e["kind"] == "corpus"]) == 3


def test_damaged_chunk_is_recomputed_with_a_warning(tiny_beir, tmp_path, caplog):
    cold = _run(tiny_beir, tmp_path, CachingFake())
    for path in (tmp_path / "cache").rglob("chunk-00000.keys.npy"):  # the chunk's texts (their vectors: by text)
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    _without_texts(tmp_path)  # the entry alone (with the store by text, nothing is encoded: test_cache_texts.py)
    encoder = CachingFake()
    with caplog.at_level(logging.WARNING, logger="harness"):
        warm = _run(tiny_beir, tmp_path, encoder)
    assert "damaged cache entry, recomputing" in caplog.text
    assert _docs_encoded(encoder) == 5
    assert warm.result.metrics == cold.result.metrics
    repaired = CachingFake()  # the recomputed entry replaced the damaged one: the next run encodes nothing
    _run(tiny_beir, tmp_path, repaired)
    assert _docs_encoded(repaired) == 0


def test_truncated_chunk_is_recomputed(tiny_beir, tmp_path):
    cold = _run(tiny_beir, tmp_path, CachingFake())
    chunks = list((tmp_path / "cache").rglob("chunk-00000.keys.npy"))
    assert len(chunks) == 2  # corpus and queries
    for path in chunks:
        path.write_bytes(path.read_bytes()[:40])
    _without_texts(tmp_path)  # the entry alone (with the store by text, nothing is encoded: test_cache_texts.py)
    encoder = CachingFake()
    warm = _run(tiny_beir, tmp_path, encoder)
    assert _docs_encoded(encoder) == 5 and len(encoder.query_texts) == 3  # recomputed, not read
    assert warm.result.metrics == cold.result.metrics
    assert sorted(np.load(path, allow_pickle=False).shape[0] for path in chunks) == [3, 5]  # rewritten whole


def test_crash_mid_encode_resumes_from_written_chunks(tiny_beir, tmp_path):

    class Crashing(CachingFake):
        def encode_docs(self, texts):
            if len(self.doc_batches) == 2:
                raise KeyboardInterrupt
            return super().encode_docs(texts)

    with pytest.raises(KeyboardInterrupt):
        _run(tiny_beir, tmp_path, Crashing(), chunk_size=2)
    (entry,) = [e for e in list_entries(tmp_path / "cache") if e["kind"] == "corpus"]
    assert not entry["complete"]
    resumed = CachingFake()
    outcome = _run(tiny_beir, tmp_path, resumed, chunk_size=2)
    assert _docs_encoded(resumed) == 1  # chunks [d1, d2] and [d3, d4] came from the cache
    reference = _run(tiny_beir, tmp_path, CachingFake(), cache=False)
    assert outcome.result.metrics == reference.result.metrics


def test_unwritable_cache_dir_warns_and_continues(tiny_beir, tmp_path, caplog):
    blocker = tmp_path / "cache"
    blocker.write_text("a file, not a folder")
    with caplog.at_level(logging.WARNING, logger="harness"):
        outcome = _run(tiny_beir, tmp_path, CachingFake())
    assert "not writable" in caplog.text
    assert (
        outcome.result.metrics["nDCG@10"]
        == _run(tiny_beir, tmp_path, CachingFake(), cache=False).result.metrics["nDCG@10"]
    )


def test_no_cache_writes_nothing(tiny_beir, tmp_path):
    _run(tiny_beir, tmp_path, CachingFake(), cache=False)
    assert not (tmp_path / "cache").exists()


def test_vectors_round_trip_exactly(tiny_beir, tmp_path):
    from harness.io.formats import iter_corpus
    from harness.records import doc_text

    encoder = CachingFake()
    _run(tiny_beir, tmp_path, encoder)
    entry = next(e for e in list_entries(tmp_path / "cache") if e["kind"] == "corpus")
    inputs = json.loads((Path(entry["path"]) / "key.json").read_text())["inputs"]
    ((_, vectors),) = embedding_entry(tmp_path / "cache", inputs).chunks()  # gathered from the store by text
    expected = np.stack([encoder._vector(doc_text(doc)) for doc in iter_corpus(tiny_beir / "corpus.jsonl")])
    np.testing.assert_array_equal(vectors, expected)
    assert vectors.dtype == np.float32 and entry["rows"] == 5 and entry["dataset"] == "tiny"


def test_every_vector_is_stored_once(tiny_beir, tmp_path):
    """After an evaluate the store holds one row per distinct text (documents, queries): the corpus and query entries
    name their texts and hold no vector."""
    from harness.io.formats import iter_corpus
    from harness.records import doc_text

    (tiny_beir / "corpus.jsonl").write_text(
        (tiny_beir / "corpus.jsonl").read_text()
        + json.dumps({"_id": "d9", "title": "", "text": "banana cherry"})
        + "\n"
    )  # d9's text repeats d2's: one vector for both
    encoder = CachingFake()
    _run(tiny_beir, tmp_path, encoder, chunk_size=2)
    texts = {doc_text(doc) for doc in iter_corpus(tiny_beir / "corpus.jsonl")}
    queries = set(encoder.query_texts)
    stored = {}
    for manifest in (tmp_path / "cache" / "texts").rglob("*.json"):
        if manifest.name != "inputs.json":
            kind = json.loads((manifest.parent / "inputs.json").read_text())["inputs"]["kind"]
            stored[kind] = stored.get(kind, 0) + json.loads(manifest.read_text())["rows"]
    assert len(texts) == 5 and stored == {"doc": len(texts), "query": len(queries)}
    assert sorted(p.name[6:] for p in (tmp_path / "cache" / "embeddings").rglob("chunk-*")) == sorted(
        [f"{n:05d}.{part}" for n in range(3) for part in ("ids.json", "keys.npy")]
        + ["00000.ids.json", "00000.keys.npy"]
    )


def test_cache_list_and_clear(tiny_beir, tmp_path):
    _run(tiny_beir, tmp_path, CachingFake())
    result = invoke(["cache", "list", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0 and "fake-bow" in result.stdout and "tiny" in result.stdout
    data = json.loads(invoke(["cache", "list", "--cache-dir", str(tmp_path / "cache"), "--json"]).stdout)
    assert {e["kind"] for e in data} == {"corpus", "queries"}
    result = invoke(["cache", "clear", "--cache-dir", str(tmp_path / "cache"), "--dataset", "other"])
    # A filter that matches nothing is an error naming what does have entries.
    assert result.exit_code == 1 and "no cache entry" in result.stderr
    assert "models fake-bow" in result.stderr and "datasets tiny" in result.stderr
    result = invoke(["cache", "clear", "--cache-dir", str(tmp_path / "cache"), "--model", "fake-bow"])
    assert result.exit_code == 0 and "removed 2" in result.stdout
    assert clear_entries(tmp_path / "cache") == []
    for command in (["cache"], ["cache", "list"], ["cache", "clear"]):
        assert "Example:" in invoke([*command, "--help"]).stdout


def test_cache_clear_asks_before_clearing_everything(tiny_beir, tmp_path):
    _run(tiny_beir, tmp_path, CachingFake())
    cache = str(tmp_path / "cache")
    dry = invoke(["cache", "clear", "--cache-dir", cache, "--dry-run"])
    assert dry.exit_code == 0 and "would remove 2 entries" in dry.stdout and "fake-bow" in dry.stdout
    assert len(list_entries(tmp_path / "cache")) == 2  # a dry run deletes nothing
    declined = invoke(["cache", "clear", "--cache-dir", cache], input="n\n")
    assert declined.exit_code == 1 and "remove all 2 entries" in declined.stderr
    assert len(list_entries(tmp_path / "cache")) == 2
    no_stdin = invoke(["cache", "clear", "--cache-dir", cache])  # nobody to answer: nothing goes
    assert no_stdin.exit_code == 1 and len(list_entries(tmp_path / "cache")) == 2
    confirmed = invoke(["cache", "clear", "--cache-dir", cache], input="y\n")
    assert confirmed.exit_code == 0 and "removed 2 entries" in confirmed.stdout
    _run(tiny_beir, tmp_path, CachingFake())
    assert invoke(["cache", "clear", "--cache-dir", cache, "--yes"]).exit_code == 0
    assert list_entries(tmp_path / "cache") == []
    empty = invoke(["cache", "clear", "--cache-dir", cache, "--model", "fake-bow"])
    assert empty.exit_code == 1 and "is empty" in empty.stderr


def test_cache_clear_accepts_the_model_aliases_evaluate_accepts(tmp_path):
    from harness.io.cache import embedding_entry
    from harness.retrieval.encode import DEFAULT_MODEL

    entry = embedding_entry(tmp_path, {"kind": "corpus", "model": {"name": DEFAULT_MODEL}}, {"dataset": "scifact"})
    entry.start(10)
    result = invoke(["cache", "clear", "--cache-dir", str(tmp_path), "--model", "all-MiniLM-L6-v2"])
    assert result.exit_code == 0, result.stderr
    assert "removed 1 entry" in result.stdout and list_entries(tmp_path) == []


def test_the_default_cache_is_per_user_not_per_folder(monkeypatch, tmp_path):
    from harness.io.cache import cache_dir

    monkeypatch.delenv("BEIR_HARNESS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert cache_dir() == tmp_path / "xdg" / "beir-harness"
    monkeypatch.setenv("BEIR_HARNESS_CACHE_DIR", str(tmp_path / "env"))
    assert cache_dir() == tmp_path / "env" and cache_dir(tmp_path / "opt") == tmp_path / "opt"


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_index_is_cached_and_a_damaged_one_rebuilt(tiny_beir, tmp_path, caplog, kind, monkeypatch):
    from harness.retrieval.index import IndexSpec, VectorIndex

    builds = []  # one entry per document added to a new index: a build, not a load from the cache
    original = VectorIndex.add

    def counting_add(self, doc_ids, vectors):
        builds.extend(doc_ids)
        return original(self, doc_ids, vectors)

    monkeypatch.setattr(VectorIndex, "add", counting_add)
    spec = IndexSpec(kind)
    cold = _run(tiny_beir, tmp_path, CachingFake(), index=spec)
    assert len(builds) == 5
    (index_file,) = (tmp_path / "cache" / "indexes").glob("*.faiss")
    with caplog.at_level(logging.INFO, logger="harness"):
        warm = _run(tiny_beir, tmp_path, CachingFake(), index=spec)
    assert len(builds) == 5  # same key: loaded, not built
    assert f"{kind} index from the cache" in caplog.text
    assert warm.result.metrics == cold.result.metrics and warm.result.index_quality == cold.result.index_quality
    index_file.write_bytes(b"garbage")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="harness"):
        rebuilt = _run(tiny_beir, tmp_path, CachingFake(), index=spec)
    assert len(builds) == 10  # damaged: built again
    assert "damaged cached index, rebuilding" in caplog.text
    assert rebuilt.result.metrics == cold.result.metrics
    _run(tiny_beir, tmp_path, CachingFake(), index=spec)
    assert len(builds) == 10  # the rebuilt file was stored and is what the next run loads
    # Other parameters are another key: another build, another file.
    _run(tiny_beir, tmp_path, CachingFake(), index=IndexSpec(kind, nprobe=2, ef_search=16))
    assert len(builds) == 15 and len(list((tmp_path / "cache" / "indexes").glob("*.faiss"))) == 2


def test_warm_run_needs_no_model_at_all(tiny_beir, tmp_path, monkeypatch, default_encoder):
    loads = []

    def counting_load(*args, **kwargs):
        loads.append(args)
        return default_encoder

    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", counting_load)
    config = {
        "dataset_path": tiny_beir,
        "output_dir": None,
        "progress": False,
        "cache_dir": tmp_path / "cache",
        "k_values": (1, 10),
    }
    cold = evaluate_dataset(EvaluateConfig(**config))
    warm = evaluate_dataset(EvaluateConfig(**config))
    assert len(loads) == 1  # the warm run used the remembered fingerprint and the cached vectors
    assert warm.result.metrics == cold.result.metrics
    assert warm.result.config["embedding_cache"] == "hit"
    assert {k: v for k, v in warm.result.config.items() if k != "embedding_cache"} == {
        k: v for k, v in cold.result.config.items() if k != "embedding_cache"
    }
    # New queries: the stand-in loads the model, once, to encode them.
    with open(tiny_beir / "queries.jsonl", "a") as handle:
        handle.write('{"_id": "q9", "text": "grape"}\n')
    (tiny_beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq9\td5\t1\n")
    partial = evaluate_dataset(EvaluateConfig(**config))
    assert len(loads) == 2 and partial.result.metrics["Recall@10"] == 1.0


class _Planted:
    """Unpickling this object would create `path`: proof that a pickle was loaded."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_planted_in_the_cache_is_never_loaded(tiny_beir, tmp_path):
    cold = _run(tiny_beir, tmp_path, CachingFake())
    marker = tmp_path / "unpickled"
    chunks = list((tmp_path / "cache").rglob("chunk-*.npy"))
    assert chunks
    for path in chunks:
        with open(path, "wb") as handle:
            np.save(handle, np.array([_Planted(marker)], dtype=object), allow_pickle=True)
    _without_texts(tmp_path)  # the entry alone (with the store by text, nothing is encoded: test_cache_texts.py)
    encoder = CachingFake()
    warm = _run(tiny_beir, tmp_path, encoder)
    assert not marker.exists()
    assert _docs_encoded(encoder) == 5 and warm.result.metrics == cold.result.metrics  # treated as damaged


def _cache_files(folder) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_read_only_cache_records_not_stored_and_still_evaluates(tiny_beir, tmp_path):
    from readonly import read_only

    cache = tmp_path / "cache"
    cache.mkdir()
    with read_only(cache):
        outcome = _run(tiny_beir, tmp_path, CachingFake())
    assert outcome.result.config["embedding_cache"] == f"not stored: {cache} is read-only"
    assert list(cache.iterdir()) == []  # nothing was stored, and the result says so
    reference = _run(tiny_beir, tmp_path, CachingFake(), cache=False)
    assert reference.result.config["embedding_cache"] == "off"
    assert outcome.result.metrics == reference.result.metrics and outcome.run == reference.run


def test_a_writable_entry_left_without_its_manifest_records_not_stored_naming_it(tiny_beir, tmp_path, monkeypatch):
    """A writable cache whose corpus entry was never completed (its manifest not written) records ``not stored``
    naming the entry, never ``stored``; once a run completes the entry, it records ``stored``."""
    from pathlib import Path

    from harness.io.cache import EmbeddingEntry

    monkeypatch.setattr(EmbeddingEntry, "finish", lambda self, *args: None)  # the manifest is never written
    outcome = _run(tiny_beir, tmp_path, CachingFake())
    (entry,) = [e for e in list_entries(tmp_path / "cache") if e["kind"] == "corpus"]
    folder = Path(entry["path"])
    assert (folder / "key.json").is_file() and not (folder / "manifest.json").exists()  # the test's premise
    assert outcome.result.config["embedding_cache"] == f"not stored: {folder} was not completed"
    monkeypatch.undo()
    completed = _run(tiny_beir, tmp_path, CachingFake())
    assert (folder / "manifest.json").is_file()
    assert completed.result.config["embedding_cache"] == "stored"
    assert completed.result.metrics == outcome.result.metrics


@pytest.mark.parametrize(
    "args",
    [["prune", "--older-than", "0s"], ["clear", "--yes"], ["clear", "--dataset", "tiny"]],
    ids=["prune", "clear-all", "clear-dataset"],
)
def test_prune_or_clear_of_a_read_only_cache_is_one_line_and_removes_nothing(tiny_beir, tmp_path, args):
    from readonly import read_only

    cache = tmp_path / "cache"
    _run(tiny_beir, tmp_path, CachingFake())
    before = _cache_files(cache)
    with read_only(cache):
        result = invoke(["cache", args[0], "--cache-dir", str(cache), *args[1:]])
    assert result.exit_code == 1, result.output
    assert (
        result.stderr == f"Error: {cache} is read-only: nothing was removed from the cache (make it writable first)\n"
    )
    assert result.stdout == ""  # no "removed 2 entries" for nothing removed
    assert _cache_files(cache) == before


def test_a_read_only_folder_inside_a_writable_cache_is_the_one_named(tiny_beir, tmp_path):
    from readonly import read_only

    cache = tmp_path / "cache"
    _run(tiny_beir, tmp_path, CachingFake())
    before = _cache_files(cache)
    with read_only(cache / "embeddings"):  # the cache root itself stays writable
        result = invoke(["cache", "clear", "--yes", "--cache-dir", str(cache)])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"Error: {cache / 'embeddings'} is ")
    assert result.stderr.endswith(f": nothing was removed from the cache {cache} (make it writable first)\n")
    assert _cache_files(cache) == before


def test_a_cache_folder_a_file_of_which_goes_meanwhile_is_still_removed_whole(tmp_path, monkeypatch):
    from harness.io.cache import upkeep as cache_module

    folder = tmp_path / "cache" / "embeddings" / "entry"
    (folder / "sub").mkdir(parents=True)
    for name in ("a.npy", "b.npy", "sub/c.npy"):
        (folder / name).write_bytes(b"x")
    real, calls = shutil.rmtree, []

    def racing_rmtree(path, *args, **kwargs):  # another process removes a file mid-way, once
        calls.append(path)
        if len(calls) == 1:
            (folder / "a.npy").unlink()
            raise FileNotFoundError(2, "No such file or directory", str(folder / "a.npy"))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(cache_module.shutil, "rmtree", racing_rmtree)
    cache_module.remove_tree(folder, tmp_path / "cache")
    assert not folder.exists() and len(calls) == 2
    cache_module.remove_tree(folder, tmp_path / "cache")  # one already gone: nothing to do, no error


# --- a cache written before the one store -------------------------------------------------------------------------

BEFORE = Path(__file__).parent / "data" / "cache-before"  # written by io/cache.py + io/textcache.py at 9bf76a9


def _fresh_vectors(encoder, folder) -> dict[str, np.ndarray]:
    from harness.io.formats import iter_corpus
    from harness.records import doc_text

    return {doc.doc_id: encoder._vector(doc_text(doc)) for doc in iter_corpus(folder / "corpus.jsonl")}


def test_a_cache_written_before_the_one_store_is_read_as_it_is(tiny_beir, tmp_path, caplog):
    """``complete/``: a run with chunks of 2 (three chunks, a query entry, merged segments by text). The new code
    finds the same keys, encodes nothing, and scores as a run without any cache; by text alone too."""
    shutil.copytree(BEFORE / "complete", tmp_path / "cache")
    keys = sorted(p.name for p in (BEFORE / "complete" / "embeddings").iterdir())
    reference = _run(tiny_beir, tmp_path, CachingFake(), cache=False)
    segments = sorted(p.name for p in (tmp_path / "cache" / "texts").rglob("*"))
    warm_encoder = CachingFake()
    with caplog.at_level(logging.INFO, logger="harness.io.cache"):
        warm = _run(tiny_beir, tmp_path, warm_encoder, chunk_size=2)
    assert _docs_encoded(warm_encoder) == 0 and warm_encoder.query_texts == []
    assert warm.result.config["embedding_cache"] == "hit" and warm.result.metrics == reference.result.metrics
    assert sorted(p.name for p in (tmp_path / "cache" / "embeddings").iterdir()) == keys  # the same keys, no new one
    # Moved into the store once, each vector found there by its checksum: no copy added, the entries' own files gone.
    assert caplog.text.count("moved the vectors of the cache entry") == 2  # the corpus entry and the query entry
    assert sorted(p.name for p in (tmp_path / "cache" / "texts").rglob("*")) == segments
    assert not [
        p for p in (tmp_path / "cache" / "embeddings").rglob("chunk-*") if not p.name.endswith(("ids.json", "keys.npy"))
    ]
    (corpus,) = [e for e in list_entries(tmp_path / "cache") if e["kind"] == "corpus"]
    from harness.io.cache import embedding_entry

    inputs = json.loads((Path(corpus["path"]) / "key.json").read_text())["inputs"]
    stored = {i: v for ids, vecs in embedding_entry(tmp_path / "cache", inputs).chunks() for i, v in zip(ids, vecs)}
    expected = _fresh_vectors(CachingFake(), tiny_beir)
    assert sorted(stored) == sorted(expected)
    for doc_id, vector in expected.items():
        np.testing.assert_array_equal(stored[doc_id], vector)
    shutil.rmtree(tmp_path / "cache" / "embeddings")  # the segments by text alone
    by_text = CachingFake()
    outcome = _run(tiny_beir, tmp_path, by_text)
    assert (
        _docs_encoded(by_text) == 0 and by_text.query_texts == [] and outcome.result.metrics == reference.result.metrics
    )
    assert outcome.result.cost["vectors"] == {
        "docs_cached": 5,
        "docs_encoded": 0,
        "queries_cached": 3,
        "queries_encoded": 0,
        "rejected": 0,
    }


def test_a_run_killed_before_the_one_store_resumes_from_its_checkpoints(tiny_beir, tmp_path):
    """``interrupted/``: one chunk of 5, a batch of 1, a checkpoint after each batch, killed at the third batch:
    three pieces and three segments by text. The new code encodes the two documents left, under the same key."""
    from harness.runtimes.spec import EncoderSpec

    shutil.copytree(BEFORE / "interrupted", tmp_path / "cache")
    (key,) = [p.name for p in (BEFORE / "interrupted" / "embeddings").iterdir()]
    resumed = CachingFake()
    config = EvaluateConfig(
        dataset_path=tiny_beir,
        output_dir=None,
        progress=False,
        cache_dir=tmp_path / "cache",
        k_values=(1, 10),
        chunk_size=5,
        checkpoint_seconds=0,
        encoder=EncoderSpec(batch_size=1),
    )
    outcome = evaluate_dataset(config, encoder=resumed)
    assert _docs_encoded(resumed) == 2 and outcome.result.config["embedding_cache"] == "stored"
    assert outcome.result.metrics == _run(tiny_beir, tmp_path, CachingFake(), cache=False).result.metrics
    (corpus,) = [e for e in list_entries(tmp_path / "cache") if e["kind"] == "corpus"]
    assert corpus["key"] == key and corpus["complete"] and corpus["rows"] == 5


def _old_entry(root: Path, corpus_sha256: str, doc_ids: list[str], vectors: np.ndarray) -> dict:
    """A complete corpus entry as an earlier version wrote it (its own ``chunk-00000.npy``); returns its inputs."""
    import hashlib

    from harness.io.cache.texts import content_key

    model = {"name": "fake-bow", "version": "v1", "dimension": vectors.shape[1]}
    inputs = {"kind": "corpus", "model": model, "text_rule": "rule", "dtype": "float32", "corpus_sha256": corpus_sha256}
    folder = root / "embeddings" / content_key(inputs)
    folder.mkdir(parents=True)
    np.save(folder / "chunk-00000.npy", vectors.astype(np.float32), allow_pickle=False)
    (folder / "chunk-00000.ids.json").write_text(json.dumps(doc_ids))
    (folder / "key.json").write_text(json.dumps({"format": 1, "chunk_size": 10, "inputs": inputs, "labels": {}}))
    sha = hashlib.sha256((folder / "chunk-00000.npy").read_bytes()).hexdigest()
    manifest = {"format": 1, "chunks": 1, "rows": len(doc_ids), "dimension": vectors.shape[1], "sha256": [sha]}
    (folder / "manifest.json").write_text(json.dumps({**manifest, "inputs": inputs}))
    return inputs


def test_two_old_entries_of_one_model_with_the_same_doc_id_keep_their_own_vectors(tmp_path):
    """Vectors migration cannot find in the store go in under a stand-in digest of the entry and the doc id: two
    entries' ``d1`` (different corpora, different vectors) never serve each other's."""
    rng = np.random.default_rng(7)
    written = {sha: rng.normal(size=(2, 8)).astype(np.float32) for sha in ("a" * 64, "b" * 64)}
    inputs = {sha: _old_entry(tmp_path, sha, ["d1", "d2"], vectors) for sha, vectors in written.items()}
    for _ in range(2):  # migrated on first open, read from the store after
        for sha, vectors in written.items():
            served = {i: v for ids, vecs in embedding_entry(tmp_path, inputs[sha]).chunks() for i, v in zip(ids, vecs)}
            assert sorted(served) == ["d1", "d2"]
            np.testing.assert_array_equal(served["d1"], vectors[0])
            np.testing.assert_array_equal(served["d2"], vectors[1])


def test_clear_of_one_model_removes_its_texts_and_keeps_another_models(tiny_beir, tmp_path):
    other = CachingFake()
    other.name = "other-bow"
    _run(tiny_beir, tmp_path, CachingFake())
    _run(tiny_beir, tmp_path, other)
    texts = tmp_path / "cache" / "texts"

    def models() -> list[str]:
        return sorted(json.loads((p / "inputs.json").read_text())["inputs"]["model"]["name"] for p in texts.iterdir())

    assert models() == ["fake-bow", "fake-bow", "other-bow", "other-bow"]  # documents and queries each
    clear_entries(tmp_path / "cache", model="fake-bow")
    assert models() == ["other-bow", "other-bow"]
    shutil.rmtree(tmp_path / "cache" / "embeddings")  # served by text alone
    again = CachingFake()
    again.name = "other-bow"
    _run(tiny_beir, tmp_path, again)
    assert _docs_encoded(again) == 0 and again.query_texts == []
