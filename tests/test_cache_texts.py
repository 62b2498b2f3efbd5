"""The embedding cache keyed by text: a vector is found wherever its text was first encoded, damage is detected and
re-encoded, two writers at once, and `cache prune` beside a run that reads. Work is counted (texts sent to a counting
fake), never timed; vectors are compared with a fresh encode."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cache import CachingFake

from harness.io.cache import embedding_entry, list_entries
from harness.io.cache.texts import TextStore, text_digests
from harness.io.cache.upkeep import prune_cache, reading
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset


def _corpus(folder: Path, docs: dict[str, tuple[str, str]], queries: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    lines = [json.dumps({"_id": i, "title": title, "text": text}) for i, (title, text) in docs.items()]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    queries = queries or {"q1": "red apples", "q2": "green pears"}
    (folder / "queries.jsonl").write_text("\n".join(json.dumps({"_id": q, "text": t}) for q, t in queries.items()))
    first = next(iter(docs))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{first}\t1\n" for q in queries)
    )
    return folder


DOCS = {f"d{i}": (f"title {i}", f"document number {i} about fruit {i % 3}") for i in range(12)}


def _run(folder: Path, root: Path, encoder, **overrides):
    options = {"dataset_path": folder, "output_dir": None, "progress": False, "cache_dir": root, "k_values": (1, 10)}
    return evaluate_dataset(EvaluateConfig(**{**options, **overrides}), encoder=encoder)


def _encoded(encoder) -> list[str]:
    return [text for batch in encoder.doc_batches for text in batch]


def _entry_vectors(cache: Path, folder: Path) -> dict[str, np.ndarray]:
    """The corpus entry's vectors of the last run on `folder`, by document id."""
    (entry,) = [e for e in list_entries(cache) if e["kind"] == "corpus" and e["dataset"] == folder.name]
    loaded = embedding_entry(cache, json.loads((Path(entry["path"]) / "key.json").read_text())["inputs"])
    return {doc_id: row for ids, vectors in loaded.chunks() for doc_id, row in zip(ids, vectors)}


def _fresh(docs: dict[str, tuple[str, str]]) -> dict[str, np.ndarray]:
    """What an encoder with no cache makes of `docs` (the text rule: title, a space, text)."""
    encoder = CachingFake()
    return {d: encoder.encode_docs([f"{title} {text}".strip()])[0] for d, (title, text) in docs.items()}


def _same_vectors(cache: Path, folder: Path, docs) -> None:
    got, expected = _entry_vectors(cache, folder), _fresh(docs)
    assert sorted(got) == sorted(expected)
    for doc_id in expected:
        np.testing.assert_allclose(got[doc_id], expected[doc_id], rtol=0, atol=1e-7)


def test_a_text_is_found_wherever_it_was_first_encoded(tmp_path):
    cache = tmp_path / "cache"
    half = {d: DOCS[d] for d in list(DOCS)[:6]}
    _run(_corpus(tmp_path / "team", half), cache, CachingFake())
    # A superset: the other half, one edited document and two added ones; the queries are shared.
    grown = dict(DOCS) | {"d3": ("title 3", "an edited text"), "n1": ("", "added one"), "n2": ("", "added two")}
    encoder = CachingFake()
    outcome = _run(_corpus(tmp_path / "grown", grown), cache, encoder)
    expected = sorted(f"{t} {x}".strip() for d, (t, x) in grown.items() if d not in half or grown[d] != half[d])
    assert sorted(_encoded(encoder)) == expected  # 6 new + 1 edited + 2 added = 9, each once
    assert encoder.query_texts == []  # both queries were encoded by the team corpus's run
    assert outcome.result.cost["vectors"] == {
        "docs_cached": 5,
        "docs_encoded": 9,
        "queries_cached": 2,
        "queries_encoded": 0,
        "rejected": 0,
    }
    _same_vectors(cache, tmp_path / "grown", grown)
    # A subset in another order: nothing to encode, and the metrics of a run without any cache.
    subset = {d: grown[d] for d in reversed(list(grown)[2:9])}
    again = CachingFake()
    cached = _run(_corpus(tmp_path / "subset", subset, {"q3": "red apples"}), cache, again)
    reference = _run(tmp_path / "subset", cache, CachingFake(), cache=False)
    assert _encoded(again) == [] and again.query_texts == [] and cached.result.metrics == reference.result.metrics
    assert reference.result.cost["vectors"]["docs_encoded"] == len(subset)
    _same_vectors(cache, tmp_path / "subset", subset)


def test_a_text_repeated_in_a_corpus_is_encoded_once(tmp_path):
    twins = {"a": ("t", "same words"), "b": ("t", "same words"), "c": ("", "other words")}
    encoder = CachingFake()
    _run(_corpus(tmp_path / "twins", twins), tmp_path / "cache", encoder)
    assert sorted(_encoded(encoder)) == ["other words", "t same words"]
    _same_vectors(tmp_path / "cache", tmp_path / "twins", twins)


def _segment_files(cache: Path, part: str) -> list[Path]:
    return sorted((cache / "texts").glob(f"*/*.{part}.npy"))


def test_a_corrupt_cached_vector_is_detected_reencoded_and_reported(tmp_path, caplog):
    cache, folder = tmp_path / "cache", _corpus(tmp_path / "c", DOCS)
    _run(folder, cache, CachingFake())
    shutil.rmtree(cache / "embeddings")  # only the vectors cached by text are left
    vectors_file = max(_segment_files(cache, "vectors"), key=lambda p: p.stat().st_size)  # the documents'
    stored = np.load(vectors_file, mmap_mode="r+")
    stored[4, 7] += 0.5  # one number of one vector, same size and shape
    stored.flush()
    del stored
    encoder = CachingFake()
    with caplog.at_level(logging.WARNING, logger="harness"):
        outcome = _run(folder, cache, encoder)
    assert "1 cached vector(s)" in caplog.text and "failed their checksum" in caplog.text
    assert len(_encoded(encoder)) == 1 and outcome.result.cost["vectors"]["rejected"] == 1
    _same_vectors(cache, folder, DOCS)
    shutil.rmtree(cache / "embeddings")
    caplog.clear()
    repaired = CachingFake()  # the new copy is found first: nothing encoded, nothing reported
    with caplog.at_level(logging.WARNING, logger="harness"):
        _run(folder, cache, repaired)
    assert _encoded(repaired) == [] and "checksum" not in caplog.text


def test_cached_vectors_of_another_dimension_are_refused_and_reencoded(tmp_path, caplog):
    cache, folder = tmp_path / "cache", _corpus(tmp_path / "c", DOCS)
    _run(folder, cache, CachingFake())
    shutil.rmtree(cache / "embeddings")
    namespace = max(_segment_files(cache, "vectors"), key=lambda p: p.stat().st_size).parent
    for path in namespace.glob("[0-9]*"):
        path.unlink()  # the documents' segments, replaced by one of 32-d vectors for the same texts
    inputs = json.loads((namespace / "inputs.json").read_text())["inputs"]
    texts = [f"{t} {x}".strip() for t, x in DOCS.values()]
    others = ["a text of no corpus", "another text of no corpus"]  # refused too, but never asked for
    TextStore(cache, inputs).add(texts + others, np.ones((len(texts) + 2, 32), np.float32))
    encoder = CachingFake()
    with caplog.at_level(logging.WARNING, logger="harness"):
        outcome = _run(folder, cache, encoder)
    assert "dimension 32, the model's is 64" in caplog.text
    assert sorted(_encoded(encoder)) == sorted(texts) and outcome.result.cost["vectors"]["rejected"] == len(texts)
    _same_vectors(cache, folder, DOCS)


def test_damaged_segment_files_are_skipped_and_a_pickle_is_never_loaded(tmp_path, caplog):
    cache, folder = tmp_path / "cache", _corpus(tmp_path / "c", DOCS)
    _run(folder, cache, CachingFake())
    shutil.rmtree(cache / "embeddings")
    for path in _segment_files(cache, "keys"):
        np.save(path, np.array([object()], dtype=object), allow_pickle=True)
    for path in _segment_files(cache, "meta"):
        path.write_bytes(path.read_bytes()[:50])  # cut short
    encoder = CachingFake()
    with caplog.at_level(logging.WARNING, logger="harness"):
        _run(folder, cache, encoder)
    assert "damaged text cache segment" in caplog.text and len(_encoded(encoder)) == len(DOCS)
    _same_vectors(cache, folder, DOCS)


class _Recording(CachingFake):
    """A fake that is slow per batch (so two processes overlap) and reports every text it encodes."""

    def __init__(self, out: Path):
        super().__init__()
        self.out = out

    def encode_docs(self, texts):

        time.sleep(0.05)  # overlap, not measured: the test counts texts
        with open(self.out, "a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(text) + "\n" for text in texts)
        return super().encode_docs(texts)


def _encode_in_child(folder: str, cache: str, out: str, queue) -> None:
    outcome = _run(Path(folder), Path(cache), _Recording(Path(out)), chunk_size=4, checkpoint_seconds=0)
    queue.put(outcome.result.metrics)


def test_two_processes_encoding_overlapping_corpora_into_one_cache(tmp_path):
    cache = tmp_path / "cache"
    first = {d: DOCS[d] for d in list(DOCS)[:9]}
    second = {d: DOCS[d] for d in list(DOCS)[3:]}
    folders = [_corpus(tmp_path / "one", first), _corpus(tmp_path / "two", second)]
    context = multiprocessing.get_context("spawn")  # not fork: faiss's OpenMP threads do not survive one
    queue = context.Queue()
    children = [
        context.Process(target=_encode_in_child, args=(str(f), str(cache), str(tmp_path / f"{f.name}.txt"), queue))
        for f in folders
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
        if child.exitcode is None:
            child.kill()
    assert [child.exitcode for child in children] == [0, 0]  # both finished
    assert queue.qsize() == 2
    for folder, docs in zip(folders, (first, second)):
        sent = [json.loads(line) for line in (tmp_path / f"{folder.name}.txt").read_text().splitlines()]
        assert len(sent) == len(set(sent)) and set(sent) <= {f"{t} {x}".strip() for t, x in docs.values()}
        _same_vectors(cache, folder, docs)
    # Nothing torn: every segment reads whole, every stored vector passes its checksum.
    union = _corpus(tmp_path / "union", DOCS)
    encoder = CachingFake()
    outcome = _run(union, cache, encoder)
    assert _encoded(encoder) == [] and outcome.result.cost["vectors"]["rejected"] == 0
    _same_vectors(cache, union, DOCS)


def test_prune_while_another_run_reads_keeps_what_it_reads(tmp_path):
    cache = tmp_path / "cache"
    old = _corpus(tmp_path / "old", {"o1": ("", "an old text"), "o2": ("", "another old text")}, {"q9": "old query"})
    _run(old, cache, CachingFake())
    old_entries = {Path(e["path"]).name for e in list_entries(cache)}  # its corpus and query entries
    live = _corpus(tmp_path / "live", DOCS)
    pruned = {}

    class PruningMidRun(CachingFake):
        def encode_queries(self, texts):
            # The corpus is encoded and indexed; its entry and text stores are held by this run.
            pruned["units"] = prune_cache(cache, max_bytes=0)
            return super().encode_queries(texts)

    outcome = _run(live, cache, PruningMidRun())
    reference = _run(live, cache, CachingFake(), cache=False)
    assert outcome.result.metrics == reference.result.metrics
    # Only the old corpus's entries went: the live run held its entry and the text stores (one model: shared).
    assert {Path(unit["path"]).name for unit in pruned["units"]} == old_entries and len(old_entries) == 2
    # What the live run held stayed: a rerun encodes nothing.
    rerun = CachingFake()
    _run(live, cache, rerun)
    assert _encoded(rerun) == []
    _same_vectors(cache, live, DOCS)


def test_prune_skips_a_held_folder_and_removes_it_once_released(tmp_path):
    cache, folder = tmp_path / "cache", _corpus(tmp_path / "c", DOCS)
    _run(folder, cache, CachingFake())
    namespaces = sorted(p for p in (cache / "texts").iterdir() if p.is_dir())
    entries = [Path(e["path"]) for e in list_entries(cache)]
    segments = len(_segment_files(cache, "vectors"))
    with reading([*namespaces, *entries]):
        assert prune_cache(cache, max_bytes=0) == []
        segment = np.load(_segment_files(cache, "vectors")[0], mmap_mode="r")  # a reader's memory map
    removed = prune_cache(cache, max_bytes=0)
    assert len(removed) == len(entries) + segments and segments == 2  # the documents' and the queries'
    assert list_entries(cache) == [] and _segment_files(cache, "vectors") == []
    assert np.asarray(segment).shape[0] > 0  # the map stays readable after the files are gone


def test_prune_by_age_keeps_what_was_used_recently(tmp_path):
    import time

    cache = tmp_path / "cache"
    _run(_corpus(tmp_path / "a", DOCS), cache, CachingFake())
    long_ago = time.time() - 40 * 86400
    for path in (cache / "embeddings").glob("*/manifest.json"):
        os.utime(path, (long_ago, long_ago))
    assert prune_cache(cache, older_than_s=30 * 86400, dry_run=True)  # both entries unused for 40 days
    kept = CachingFake()
    _run(_corpus(tmp_path / "a", DOCS), cache, kept)  # reading them marks them used now
    assert _encoded(kept) == [] and prune_cache(cache, older_than_s=30 * 86400) == []


def test_cache_list_reports_the_disk_size_and_prune_takes_sizes_and_ages(tmp_path):
    cache, folder = tmp_path / "cache", _corpus(tmp_path / "c", DOCS)
    _run(folder, cache, CachingFake())
    listed = invoke(["cache", "list", "--cache-dir", str(cache)])
    on_disk = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    assert listed.exit_code == 0 and f" in all, {on_disk:,} bytes" in listed.stdout
    assert "texts " in listed.stdout and "embeddings " in listed.stdout
    dry = invoke(["cache", "prune", "--cache-dir", str(cache), "--max-size", "0", "--dry-run"])
    assert dry.exit_code == 0 and "would remove" in dry.stdout and len(list_entries(cache)) == 2
    bad = invoke(["cache", "prune", "--cache-dir", str(cache), "--older-than", "3 weeks"])
    assert bad.exit_code == 2 and "'3 weeks' is not a duration" in bad.stderr and len(list_entries(cache)) == 2
    bad = invoke(["cache", "prune", "--cache-dir", str(cache), "--max-size", "lots"])
    assert bad.exit_code == 2 and "'lots' is not a size" in bad.stderr
    done = invoke(["cache", "prune", "--cache-dir", str(cache), "--max-size", "1KB"])
    assert done.exit_code == 0 and list_entries(cache) == [] and _segment_files(cache, "vectors") == []


@pytest.mark.parametrize("texts", [["a", "b", "a"], [""], ["é" * 1000, "e"]])
def test_text_digests_are_the_sha256_of_the_utf8_text(texts):
    import hashlib

    digests = text_digests(texts)
    for text, row in zip(texts, digests):
        raw = hashlib.sha256(text.encode("utf-8")).digest()
        expected = [int.from_bytes(raw[i : i + 8], "big") for i in (0, 8, 16)]
        assert [int(value) for value in row] == expected


def test_a_corpus_entry_written_before_the_cache_by_text_is_reused_for_its_corpus(tiny_beir, tmp_path):
    """An entry an earlier version wrote, its vectors in its own files and the store by text gone: its vectors move
    into the store once (under digests of their own: their texts are unknown) and are read as they are."""
    from test_cache import BEFORE

    cache = tmp_path / "cache"
    shutil.copytree(BEFORE / "complete", cache)
    shutil.rmtree(cache / "texts")  # a cache as an earlier version left it: corpus and query entries only
    cold = _run(tiny_beir, tmp_path / "none", CachingFake(), cache=False)
    warm_encoder = CachingFake()
    warm = _run(tiny_beir, cache, warm_encoder)
    assert _encoded(warm_encoder) == [] and warm_encoder.query_texts == []
    assert warm.result.config["embedding_cache"] == "hit" and warm.result.metrics == cold.result.metrics
    assert warm.result.cost["vectors"]["docs_cached"] == 5
    assert not list((cache / "embeddings").rglob("chunk-?????.npy"))  # moved, not copied
    # Its vectors were not filed by text: another corpus encodes its texts once, and then finds them.
    lines = (tiny_beir / "corpus.jsonl").read_text().splitlines()
    edited = [*lines[:-1], json.dumps({"_id": "d5", "text": "edited"})]
    first, second = CachingFake(), CachingFake()
    for name, corpus, encoder in (("e", edited, first), ("f", edited[::-1], second)):
        shutil.copytree(tiny_beir, tmp_path / name)
        (tmp_path / name / "corpus.jsonl").write_text("\n".join(corpus) + "\n")
        _run(tmp_path / name, cache, encoder)
    assert len(_encoded(first)) == 5 and _encoded(second) == []


def test_a_model_of_unknown_dimension_encodes_again_what_was_cached_at_another(tmp_path, caplog):
    from harness.records import Doc
    from harness.retrieval.encode import encode_corpus

    class Unknown(CachingFake):
        """Its dimension is known only once it has encoded (an endpoint before its probe)."""

        def __init__(self):
            super().__init__()
            self.dimension = None

        def _vector(self, text):
            return CachingFake()._vector(text)  # 64-d

    docs = [Doc(d, title, text) for d, (title, text) in DOCS.items()]
    texts = [f"{t} {x}".strip() for t, x in DOCS.values()]
    store = TextStore(tmp_path / "cache", {"kind": "doc", "model": {"name": "unknown"}})
    store.add(texts[:6], np.ones((6, 32), np.float32))  # damaged: 32-d, where the model makes 64-d vectors
    encoder = Unknown()
    with caplog.at_level(logging.WARNING, logger="harness"):
        ((ids, vectors, _),) = list(encode_corpus(encoder, iter(docs), progress=False, texts=store))
    assert "cached vectors of dimension 32, the model's is 64" in caplog.text
    assert sorted(_encoded(encoder)) == sorted(texts)  # each text once
    expected = _fresh(DOCS)
    np.testing.assert_allclose(vectors, np.stack([expected[d] for d in ids]), rtol=0, atol=1e-7)


def test_the_segments_of_one_run_are_merged_into_one(tmp_path):
    cache, folder = tmp_path / "cache", _corpus(tmp_path / "c", DOCS)
    _run(folder, cache, CachingFake(), chunk_size=4)  # three chunks, a segment each while encoding
    by_size = sorted(_segment_files(cache, "vectors"), key=lambda p: p.stat().st_size)
    assert len(by_size) == 2  # the documents' (merged) and the queries'
    assert np.load(by_size[-1], mmap_mode="r").shape == (len(DOCS), 64)
    shutil.rmtree(cache / "embeddings")
    reordered = _corpus(tmp_path / "r", dict(reversed(DOCS.items())))
    encoder = CachingFake()
    _run(reordered, cache, encoder, chunk_size=5)
    assert _encoded(encoder) == []
    _same_vectors(cache, reordered, DOCS)


# --- stores kept apart, segments marked used, and pruned least recently used first --------------------------------

_WORDS = st.sampled_from(["red", "green", "apple", "pear", "red apple", ""])  # few texts: queries and docs collide


def _prompted(prompt: str):
    """An encoder that sees a prompt before each text (as query and document prompts differ), counting its texts."""
    seen: list[str] = []

    def encode(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        raw = [hashlib.sha256(f"{prompt}{t}".encode()).digest()[:16] for t in texts]
        return np.frombuffer(b"".join(raw), dtype=np.uint8).reshape(len(texts), 16).astype(np.float32)

    return encode, seen


@settings(derandomize=True, deadline=None, max_examples=15)
@given(
    st.lists(
        st.tuples(st.lists(_WORDS, min_size=1, max_size=5), st.lists(_WORDS, min_size=1, max_size=5)),
        min_size=1,
        max_size=3,
    )
)
def test_queries_and_documents_of_the_same_text_keep_their_own_vectors(runs):
    from harness.io.cache.texts import encode_with_store, text_stores

    encode_doc, encode_query = _prompted("passage: ")[0], _prompted("query: ")[0]
    seen: dict[str, set[str]] = {"doc": set(), "query": set()}
    with tempfile.TemporaryDirectory() as scratch:
        for docs, queries in runs:  # each run opens the stores again, as a new process would
            doc_store, query_store = text_stores(Path(scratch), {"name": "m"}, "title text")
            for kind, store, texts, reference in (
                ("doc", doc_store, docs, encode_doc),
                ("query", query_store, queries, encode_query),
            ):
                encode, sent = _prompted("passage: " if kind == "doc" else "query: ")
                vectors, encoded = encode_with_store(store, texts, encode, 16)
                np.testing.assert_array_equal(vectors, reference(texts))  # its own prompt's vectors, never the other's
                assert sorted(sent) == sorted(set(texts) - seen[kind]) and encoded == len(sent)
                seen[kind] |= set(texts)
            assert doc_store.folder != query_store.folder


def test_queries_share_one_store_whatever_the_document_text_rule(tmp_path):
    """The text rule says how a document's title and text are joined; a query has no title, so its vectors do not
    depend on the rule: queries encoded under one rule are found under another, documents are encoded again."""
    from harness.io.cache.texts import encode_with_store, text_stores

    texts = ["red apples", "green pears", "red apples"]
    reference = _prompted("")[0](texts)  # a fresh encode, not the store's
    first = text_stores(tmp_path, {"name": "m"}, "(title + ' ' + text).strip()")
    second = text_stores(tmp_path, {"name": "m"}, "text")
    for store in first:
        encode_with_store(store, texts, _prompted("")[0], 16)
    (doc_encode, doc_sent), (query_encode, query_sent) = _prompted(""), _prompted("")
    doc_vectors, _ = encode_with_store(second[0], texts, doc_encode, 16)
    query_vectors, _ = encode_with_store(second[1], texts, query_encode, 16)
    assert sorted(doc_sent) == ["green pears", "red apples"]  # another rule: other document texts, encoded again
    assert query_sent == []  # the same queries: every vector found
    np.testing.assert_array_equal(doc_vectors, reference)
    np.testing.assert_array_equal(query_vectors, reference)
    assert first[1].folder == second[1].folder and first[0].folder != second[0].folder


# --- one store for every model, kind and layout: generated so that a wrong store serves a wrong vector -------------

_TEXTS = st.sampled_from(["a", "ab", "abc", "abd", "b", "", "ab "])  # shared prefixes, the empty text, a space


def _reference(model: str, kind: str, layout: str, text: str) -> np.ndarray:
    """What the model makes of `text`, independently of any store: a vector, or (ragged) a matrix of
    ``len(text) % 4`` token vectors (none for some texts), each number from sha256 of everything that decides it."""
    tokens = len(text) % 4 if layout == "ragged" else 1
    raw = [hashlib.sha256(f"{model}|{kind}|{layout}|{text}|{i}".encode()).digest()[:16] for i in range(tokens)]
    rows = np.frombuffer(b"".join(raw), dtype=np.uint8).reshape(tokens, 16).astype(np.float32) / 7
    return rows.astype(np.float16) if layout == "ragged" else rows[0]


@settings(derandomize=True, deadline=None, max_examples=25)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["m1", "m2"]),
            st.sampled_from(["doc", "query"]),
            st.sampled_from(["fixed", "ragged"]),
            st.lists(_TEXTS, min_size=2, max_size=6),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_every_model_kind_and_layout_keeps_its_own_vectors(calls):
    """Two models, documents and queries, float32 vectors and float16 token matrices, texts that share prefixes:
    each call gets exactly the reference of its own (model, kind, layout) and encodes only the texts that store
    has not seen; every store is opened again per call, as a new process would, and compacted after."""
    from harness.io.cache.texts import encode_with_store, text_stores, token_stores

    seen: dict[tuple[str, str, str], set[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for model, kind, layout, texts in calls:
            opened = (text_stores if layout == "fixed" else token_stores)(Path(scratch), {"name": model}, "rule")
            store = opened[kind != "doc"]
            sent: list[str] = []

            def encode(batch, model=model, kind=kind, layout=layout, sent=sent):
                sent.extend(batch)
                made = [_reference(model, kind, layout, text) for text in batch]
                return made if layout == "ragged" else np.stack(made)

            half = len(texts) // 2  # two segments written by one store, merged by `compact`
            first, encoded = encode_with_store(store, texts[:half], encode, None)
            second, more = encode_with_store(store, texts[half:], encode, None)
            store.compact()
            done = seen.setdefault((model, kind, layout), set())
            assert sorted(sent) == sorted(set(texts) - done) and encoded + more == len(sent)
            done |= set(texts)
            rows, merged = type(store)(Path(scratch), store.inputs).lookup(texts)  # read back after the merge
            assert sorted(rows.tolist()) == list(range(len(texts)))
            got = [*first, *second]
            for row, value in zip(rows.tolist(), merged):
                np.testing.assert_array_equal(value, got[row])
            for text, value in zip(texts, got):
                expected = _reference(model, kind, layout, text)
                assert value.dtype == expected.dtype and value.shape == expected.shape
                np.testing.assert_array_equal(value, expected)
        folders = {
            (model, kind, layout): (text_stores if layout == "fixed" else token_stores)(
                Path(scratch), {"name": model}, "rule"
            )[kind != "doc"].folder
            for model, kind, layout, _ in calls
        }
        assert len(set(folders.values())) == len(folders)  # one namespace each


def test_token_matrices_are_float16_from_the_store_or_not_and_a_changed_number_is_encoded_again(tmp_path, caplog):
    from harness.io.cache.texts import encode_token_matrices

    texts = ["late interaction", "one matrix per text", "late interaction", "abc"]
    calls: list[list[str]] = []

    def encode(batch):
        calls.append(list(batch))
        return [_reference("colbert", "doc", "ragged", text).astype(np.float32) + 1e-4 for text in batch]

    identity = {"name": "colbert", "weights": "x"}
    cold, encoded = encode_token_matrices(tmp_path, identity, "doc", texts, encode, "rule")
    uncached, _ = encode_token_matrices(None, None, "doc", texts, encode)
    warm, again = encode_token_matrices(tmp_path, identity, "doc", texts, encode, "rule")
    assert encoded == 3 and again == 0 and calls[0] == ["late interaction", "one matrix per text", "abc"]
    for a, b, c, text in zip(cold, uncached, warm, texts):
        expected = (_reference("colbert", "doc", "ragged", text).astype(np.float32) + 1e-4).astype(np.float16)
        for value in (a, b, c):
            assert value.dtype == np.float16
            np.testing.assert_array_equal(value, expected)
    queries, encoded = encode_token_matrices(tmp_path, identity, "query", texts[:1], encode)
    assert encoded == 1  # a query store of its own: the document's matrix is never served for a query
    (vectors_file,) = [p for p in _segment_files(tmp_path, "vectors") if np.load(p, mmap_mode="r").shape[0] > 3]
    stored = np.load(vectors_file, mmap_mode="r+")
    stored[0, 0] += 1  # one number of one text's matrix
    stored.flush()
    del stored
    with caplog.at_level(logging.WARNING, logger="harness"):
        repaired, encoded = encode_token_matrices(tmp_path, identity, "doc", texts, encode, "rule")
    assert "1 cached vector(s)" in caplog.text and encoded == 1
    for value, expected in zip(repaired, cold):
        np.testing.assert_array_equal(value, expected)


def test_prune_during_a_token_matrix_encode_removes_nothing_it_reads(tmp_path):
    import threading

    from harness.io.cache.texts import encode_token_matrices

    identity = {"name": "colbert", "weights": "x"}

    def encode(batch):
        return [_reference("colbert", "doc", "ragged", text) for text in batch]

    texts = ["late interaction", "one matrix per text"]
    encode_token_matrices(tmp_path, identity, "doc", texts, encode, "rule")
    stored = sorted(p.name for p in tmp_path.glob("texts/*/*"))
    pruned: dict[str, list] = {}

    def pruning(batch):  # mid-run: the stored matrices are read, the new text is being encoded
        worker = threading.Thread(target=lambda: pruned.setdefault("units", prune_cache(tmp_path, older_than_s=0)))
        worker.start()
        worker.join()
        return encode(batch)

    matrices, encoded = encode_token_matrices(tmp_path, identity, "doc", [*texts, "a new text"], pruning, "rule")
    assert encoded == 1 and pruned["units"] == []
    assert set(stored) <= {p.name for p in tmp_path.glob("texts/*/*")}
    again, encoded = encode_token_matrices(tmp_path, identity, "doc", [*texts, "a new text"], encode, "rule")
    assert encoded == 0
    for matrix, text in zip(again, [*texts, "a new text"]):
        np.testing.assert_array_equal(matrix, _reference("colbert", "doc", "ragged", text).astype(np.float16))


def test_a_damaged_query_vector_is_counted_as_rejected(tmp_path, caplog):
    cache, folder = tmp_path / "cache", _corpus(tmp_path / "c", DOCS)
    _run(folder, cache, CachingFake())
    shutil.rmtree(cache / "embeddings")
    (queries,) = [
        p
        for p in (cache / "texts").iterdir()
        if json.loads((p / "inputs.json").read_text())["inputs"]["kind"] == "query"
    ]
    (vectors_file,) = queries.glob("*.vectors.npy")
    stored = np.load(vectors_file, mmap_mode="r+")
    stored[1, 3] += 0.5  # one number of one query's vector
    stored.flush()
    del stored
    encoder = CachingFake()
    with caplog.at_level(logging.WARNING, logger="harness"):
        outcome = _run(folder, cache, encoder)
    assert "1 cached vector(s)" in caplog.text and len(encoder.query_texts) == 1 and _encoded(encoder) == []
    assert outcome.result.cost["vectors"] == {
        "docs_cached": len(DOCS),
        "docs_encoded": 0,
        "queries_cached": 1,
        "queries_encoded": 1,
        "rejected": 1,
    }
