"""Long documents as passages (``--passages``): the split against the tokenizer's own tokens, the document scores and
the exact top against brute-force loops, the identity of a run without passages pinned, passages cached by their
text, and every bad value refused in one line before anything is encoded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.records import Doc
from harness.retrieval.index.passages import (
    PassageSpec,
    document_scores,
    search_passages,
    split_documents,
    token_windows,
)

# Whole words, and words the tokenizer cuts into pieces (photo ##syn ##thesis): a window must never split them.
STEMS = ["apple", "banana", "cherry", "date", "fig", "grape", "photo", "stone", "fruit", "kiwi"]
PIECES = ["##syn", "##thesis", "##s", "##ed"]
WORDS = [*STEMS, *PIECES, ",", "."]
SURFACE = [*STEMS, "photosynthesis", "photos", "stoned", "dates", ",", "."]  # what the documents are written with


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from tiny_models import save_tokenizer
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tok")
    save_tokenizer(folder, WORDS)
    return AutoTokenizer.from_pretrained(str(folder))


def _brute_spans(tokens: list[str], window: int, stride: int) -> list[tuple[int, int]]:
    """The passages by the documented rule, from the token strings alone (a ``##`` piece continues its word)."""
    n = len(tokens)
    if n <= window:
        return [(0, n)]
    word_starts = [i for i, token in enumerate(tokens) if not token.startswith("##")]
    spans, start = [], 0
    while start + window < n:
        end = max(p for p in [*word_starts, start] if p <= start + window)
        spans.append((start, end))
        within = [p for p in word_starts if start < p <= start + stride]
        start = max(within) if within else min(p for p in word_starts if p > start)  # past a long word: the next
    return [*spans, (start, n)]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    words=st.lists(st.sampled_from(SURFACE), min_size=0, max_size=40),
    title=st.sampled_from(["", "Fruit", "stone fruit"]),
    window=st.integers(3, 9),
    overlap=st.integers(0, 3),
)
def test_each_passage_is_its_window_of_the_tokenizers_own_tokens(tokenizer, words, title, window, overlap):
    text = " ".join(words)
    stride = max(1, window - overlap)
    doc = Doc("d", title, text)
    (passages,) = split_documents([doc], tokenizer, PassageSpec(window, stride))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    spans = _brute_spans(tokens, window, stride)
    if len(spans) == 1:
        assert passages == [(title + " " + text).strip()]  # the document's own text: a run without passages'
        return
    assert len(passages) == len(spans)
    title_ids = tokenizer(title, add_special_tokens=False)["input_ids"]
    for passage, (start, end) in zip(passages, spans):
        # re-tokenised, each passage is the title's tokens and exactly the tokens of its window of the document
        assert tokenizer(passage, add_special_tokens=False)["input_ids"] == title_ids + ids[start:end]
        assert end - start <= window
    assert spans[-1][1] == len(ids)  # the last passage reaches the end: nothing is left unread


def _brute_windows(word_starts: list[bool], window: int, stride: int) -> list[tuple[int, int]]:
    """The documented rule over every token: a window ends at its last word start, a word longer than the window
    is cut at the window's end and the next passage starts at the cut; the next starts at the last word start
    within the stride, else at the next word."""
    n = len(word_starts)
    if n <= window:
        return [(0, n)]
    firsts = [i for i in range(n) if word_starts[i] or i == 0]
    spans, start = [], 0
    while start + window < n:
        fitting = [p for p in firsts if start < p <= start + window]
        end = max(fitting) if fitting else start + window
        spans.append((start, end))
        within = [p for p in firsts if start < p <= start + stride]
        start = max(within) if within else min([p for p in firsts if p > start] + [end])
    return [*spans, (start, n)]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=15),  # tokens per word: many longer than the window
    window=st.integers(1, 8),
    data=st.data(),
)
def test_no_window_is_longer_than_window_tokens_even_over_a_word_longer_than_it(lengths, window, data):
    stride = data.draw(st.integers(1, window))
    word_starts = [n == 0 for length in lengths for n in range(length)]
    spans = token_windows(word_starts, window, stride)
    assert spans == _brute_windows(word_starts, window, stride)
    assert all(0 < end - start <= window for start, end in spans)
    assert spans[0][0] == 0 and spans[-1][1] == len(word_starts)
    assert all(start <= previous_end for (_, previous_end), (start, _) in zip(spans, spans[1:]))  # none skipped


def test_a_document_within_one_window_is_its_own_text_and_titles_open_every_passage(tokenizer):
    short, long = Doc("a", "Fruit", "apple banana"), Doc("b", "stone fruit", "apple banana cherry date fig grape")
    split = split_documents([short, long], tokenizer, PassageSpec(4, 2))
    assert split[0] == ["Fruit apple banana"]
    assert split[1] == ["stone fruit apple banana cherry date", "stone fruit cherry date fig grape"]


@st.composite
def _passage_scores(draw):
    """Documents with 1-6 passages, small integer scores (ties everywhere) that disagree across passages."""
    counts = draw(st.lists(st.integers(1, 6), min_size=1, max_size=12))
    n_queries = draw(st.integers(1, 4))
    values = draw(st.lists(st.integers(-4, 4), min_size=n_queries * sum(counts), max_size=n_queries * sum(counts)))
    scores = np.array(values, dtype=np.float32).reshape(n_queries, sum(counts)) / np.float32(3)
    return scores, counts


@settings(max_examples=200, deadline=None, derandomize=True)
@given(case=_passage_scores(), how=st.sampled_from(["maxp", "firstp", "sump"]))
def test_document_scores_equal_a_loop_over_each_documents_passages(case, how):
    scores, counts = case
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    got = document_scores(scores, starts, how)
    for q in range(scores.shape[0]):
        for d, (start, count) in enumerate(zip(starts.tolist(), counts)):
            own = [float(value) for value in scores[q, start : start + count]]
            expected = {"maxp": max(own), "firstp": own[0], "sump": sum(own)}[how]
            assert got[q, d] == np.float32(expected)


@st.composite
def _corpus(draw):
    """Integer vectors (every inner product exact in float32), many passages per document, ties at the cut."""
    counts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=15))
    dimension = draw(st.integers(1, 3))
    passages = draw(
        st.lists(
            st.lists(st.integers(-2, 2), min_size=dimension, max_size=dimension),
            min_size=sum(counts),
            max_size=sum(counts),
        )
    )
    queries = draw(
        st.lists(st.lists(st.integers(-2, 2), min_size=dimension, max_size=dimension), min_size=1, max_size=3)
    )
    return counts, np.array(passages, dtype=np.float32), np.array(queries, dtype=np.float32)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    corpus=_corpus(),
    depth=st.integers(1, 6),
    block=st.integers(1, 40),
    how=st.sampled_from(["maxp", "firstp", "sump"]),
)
def test_the_top_documents_are_the_brute_force_top_over_every_passage(corpus, depth, block, how):
    counts, passages, queries = corpus
    doc_ids = [f"d{n:02d}" for n in range(len(counts))]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    run = search_passages(
        [f"q{n}" for n in range(len(queries))], queries, passages, doc_ids, starts, depth, how, block_entries=block
    )
    for n, query in enumerate(queries):
        scores = {}
        for doc_id, start, count in zip(doc_ids, starts.tolist(), counts):
            own = [sum(int(a) * int(b) for a, b in zip(query, passages[p])) for p in range(start, start + count)]
            scores[doc_id] = {"maxp": max(own), "firstp": own[0], "sump": sum(own)}[how]
        # trec_eval's order: score descending, ties by doc_id descending; the first `depth`
        expected = sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)[:depth]
        assert [(hit.doc_id, hit.score) for hit in run[f"q{n}"]] == [(d, float(s)) for d, s in expected]


# --- the identity of a run without passages, pinned before passages existed -------------------------------------


PINNED = {  # configuration hashes computed by the code before --passages existed
    ("all-MiniLM-L6-v2", None): "0f723d59bb0393d3",
    ("all-MiniLM-L6-v2", 1000): "81ba3442adbfe615",
    ("hash:16", None): "57deda1d5f0c5c45",
}


@pytest.mark.parametrize(("model", "top_k"), list(PINNED))
def test_a_run_without_passages_keeps_the_configuration_hash_it_had(model, top_k):
    from harness.pipeline.evaluate import EvaluateConfig, configuration

    config = EvaluateConfig(dataset_path=Path("/nonexistent"), model=model, top_k=top_k)
    assert configuration(config, "scifact").config_hash == PINNED[(model, top_k)]
    with_passages = configuration(EvaluateConfig(**{**config.__dict__, "passages": PassageSpec(128)}), "scifact")
    assert with_passages.config_hash != PINNED[(model, top_k)]
    assert with_passages.variant.startswith("maxp128-" if top_k is None else "maxp128_top1000-")
    assert with_passages.changed["passages"] == {"window": 128, "stride": 128, "score": "maxp"}


# --- end to end: the command line, the cache, bad values ------------------------------------------------------------

CORPUS = [
    {"_id": "d1", "title": "", "text": "apple banana cherry date"},
    {"_id": "d2", "title": "", "text": "apple banana fig grape"},  # shares the passage "apple banana" with d1
    {"_id": "d3", "title": "Fruit", "text": "kiwi"},
]
QUERIES = [{"_id": "q1", "text": "cherry"}, {"_id": "q2", "text": "grape fig"}]


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "data"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in CORPUS), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    from tiny_models import bi_encoder

    folder = tmp_path_factory.mktemp("passage-model") / "bi"
    return bi_encoder(folder, STEMS, hidden=32, positions=64, normalize=True, max_seq_length=16)


@pytest.fixture
def encoded(monkeypatch) -> list[str]:
    """Every document text the model is asked to encode (queries apart)."""
    from sentence_transformers import SentenceTransformer

    texts: list[str] = []
    original = SentenceTransformer.encode

    def encode(self, sentences, *args, **kwargs):
        queries = {query["text"] for query in QUERIES}
        texts.extend(text for text in ([sentences] if isinstance(sentences, str) else sentences) if text not in queries)
        return original(self, sentences, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformer, "encode", encode)
    return texts


def _evaluate(folder: Path, model, tmp_path: Path, *options: str):
    return invoke(
        [
            "-q",
            "evaluate",
            str(folder),
            "--model",
            str(model),
            "--output-dir",
            str(tmp_path / "results"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--k",
            "1,2",
            "--json",
            *options,
        ]
    )


def test_passages_are_encoded_once_per_text_and_a_rerun_encodes_nothing(folder, model, tmp_path, encoded):
    first = _evaluate(folder, model, tmp_path, "--passages", "2")
    assert first.exit_code == 0, first.output
    # d1 and d2 share "apple banana": encoded once; d3 fits one window: its own text
    assert sorted(encoded) == sorted(["apple banana", "cherry date", "fig grape", "Fruit kiwi"])
    result = json.loads(first.stdout)
    assert result["config"]["passages"]["n_passages"] == 5
    assert result["cost"]["vectors"]["docs_encoded"] == 4
    encoded.clear()
    second = json.loads(_evaluate(folder, model, tmp_path, "--passages", "2").stdout)
    assert encoded == []
    assert second["config"]["embedding_cache"] == "hit"
    assert second["metrics"] == result["metrics"]


def test_a_first_passages_run_counts_each_passage_encoded_and_a_rerun_each_cached(folder, model, tmp_path, encoded):
    """No two passages alike: the first run finds none in the store and encodes each (as many as the model was asked
    to encode, counted in the test); the rerun finds each there and encodes none."""
    corpus = [{**CORPUS[0]}, {"_id": "d2", "title": "", "text": "fig grape stone kiwi"}, {**CORPUS[2]}]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in corpus), encoding="utf-8")
    first = json.loads(_evaluate(folder, model, tmp_path, "--passages", "2").stdout)
    assert sorted(encoded) == sorted(set(encoded)) and len(encoded) == 5
    assert first["config"]["passages"]["n_passages"] == len(encoded)
    vectors = first["cost"]["vectors"]
    assert (vectors["docs_cached"], vectors["docs_encoded"]) == (0, len(encoded))
    encoded.clear()
    second = json.loads(_evaluate(folder, model, tmp_path, "--passages", "2").stdout)
    assert encoded == []
    assert (second["cost"]["vectors"]["docs_cached"], second["cost"]["vectors"]["docs_encoded"]) == (5, 0)


def test_a_window_holding_every_document_ranks_as_a_run_without_passages(folder, model, tmp_path):
    plain = json.loads(_evaluate(folder, model, tmp_path).stdout)
    whole = json.loads(_evaluate(folder, model, tmp_path, "--passages", "16").stdout)
    assert whole["config"]["passages"]["docs_split"] == 0
    assert whole["variant"].startswith("maxp16") and plain["variant"] == ""
    for query_id, values in plain["per_query"].items():
        assert whole["per_query"][query_id] == pytest.approx(values)


def test_the_three_scores_rank_a_split_corpus_as_their_brute_force_loops(folder, model, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    monkeypatch.setattr("harness.pipeline.dense.passages.SPLIT_DOCS", 2)  # two chunks: d1 and d2, then d3

    st_model = SentenceTransformer(str(model), device="cpu")
    queries = st_model.encode([q["text"] for q in QUERIES], normalize_embeddings=True)
    passages = {
        "d1": ["apple banana", "cherry date"],
        "d2": ["apple banana", "fig grape"],
        "d3": ["Fruit kiwi"],
    }
    for how in ("maxp", "firstp", "sump"):
        run_file = tmp_path / f"{how}.trec"
        result = invoke(
            ["-q", "retrieve", str(folder), "--model", str(model), "--passages", "2", "--passage-score", how]
            + ["--out", str(run_file), "--cache-dir", str(tmp_path / "cache"), "--top-k", "3"]
        )
        assert result.exit_code == 0, result.output
        lines = [line.split() for line in run_file.read_text().splitlines()]
        for n, query in enumerate(QUERIES):
            scores = {}
            for doc_id, texts in passages.items():
                own = [float(v) for v in st_model.encode(texts, normalize_embeddings=True) @ queries[n]]
                scores[doc_id] = {"maxp": max(own), "firstp": own[0], "sump": sum(own)}[how]
            got = [(line[2], float(line[4])) for line in lines if line[0] == query["_id"]]
            # ties (firstp: d1 and d2 open with the same passage) by doc_id descending, as trec_eval
            expected = sorted(scores.items(), key=lambda item: (round(item[1], 5), item[0]), reverse=True)
            assert [doc for doc, _ in got] == [doc for doc, _ in expected]
            assert [score for _, score in got] == pytest.approx([score for _, score in expected], abs=1e-5)


BAD = {
    "window-0": (["--passages", "0"], "--passages window must be at least 1 token"),
    "stride-0": (["--passages", "8:0"], "--passages stride must be at least 1 token"),
    "not-an-integer": (["--passages", "1.5"], "'1.5' is not WINDOW[:STRIDE] in whole tokens"),
    "stride-longer-than-window": (["--passages", "4:8"], "stride 8 is longer than the window 4"),
    "window-longer-than-the-model": (["--passages", "64"], "window 64 is longer than the 16 tokens the model reads"),
    "window-longer-than-max-seq-length": (
        ["--passages", "12", "--max-seq-length", "8"],
        "window 12 is longer than the 8 tokens the model reads",
    ),
    "score-without-passages": (["--passage-score", "sump"], "--passage-score sump scores passages; give --passages"),
    "with-an-index": (["--passages", "8", "--index", "hnsw"], "--passages scores every passage exactly (no index)"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_passage_setting_is_one_line_before_anything_is_encoded(case, folder, model, tmp_path, encoded):
    options, message = BAD[case]
    result = _evaluate(folder, model, tmp_path, *options)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert encoded == []
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()


def test_bm25_ignores_passages_and_records_none(folder, tmp_path):
    result = invoke(
        ["evaluate", str(folder), "--model", "bm25", "--passages", "8", "--output-dir", str(tmp_path / "r"), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "--passages ignored" in result.stderr
    assert json.loads(result.stdout)["variant"] == ""


def test_a_sparse_encoder_scores_documents_by_their_passages(folder, tmp_path):
    from sentence_transformers import SparseEncoder
    from tiny_models import sparse_encoder

    path = sparse_encoder(tmp_path / "sparse", STEMS, raw=tmp_path / "mlm")
    first = _evaluate(folder, path, tmp_path, "--passages", "2", "--top-k", "3")
    assert first.exit_code == 0, first.output
    second = json.loads(_evaluate(folder, path, tmp_path, "--passages", "2", "--top-k", "3").stdout)
    assert second["config"]["embedding_cache"] == "hit" and second["metrics"] == json.loads(first.stdout)["metrics"]
    run = (tmp_path / "results").rglob("*.run.trec")
    lines = [line.split() for line in next(run).read_text().splitlines()]
    model = SparseEncoder(str(path), device="cpu")
    passages = {"d1": ["apple banana", "cherry date"], "d2": ["apple banana", "fig grape"], "d3": ["Fruit kiwi"]}
    for query in QUERIES:
        q = model.encode_query([query["text"]], convert_to_sparse_tensor=False, convert_to_tensor=False)
        scores = {}
        for doc_id, texts in passages.items():
            rows = model.encode_document(texts, convert_to_sparse_tensor=False, convert_to_tensor=False)
            scores[doc_id] = max(float(np.dot(np.asarray(q[0]), np.asarray(row))) for row in rows)
        expected = sorted((d for d, s in scores.items() if s > 0), key=lambda d: (round(scores[d], 5), d), reverse=True)
        assert [line[2] for line in lines if line[0] == query["_id"]] == expected


# --- a learned sparse encoder over passages, its rows a bag of words: every score an exact integer ---------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]  # tiny_models' vocabulary: the rows' columns


def _bags(self, texts):
    """Each text's word counts (a query's too): a passage shares a query's words or scores exactly 0."""
    import scipy.sparse

    rows = np.zeros((len(texts), len(VOCAB)), dtype=np.float32)
    for n, text in enumerate(texts):
        for word in text.split():
            rows[n, VOCAB.index(word)] += 1
    return scipy.sparse.csr_matrix(rows)


@pytest.fixture(scope="module")
def sparse_model(tmp_path_factory) -> Path:
    from tiny_models import sparse_encoder

    return sparse_encoder(tmp_path_factory.mktemp("passage-sparse") / "sparse", STEMS)


def _sparse_run(root: Path, model: Path, docs, queries, passages: str, how: str, depth: int, cache: Path):
    """``retrieve`` over `docs` (word lists) and `queries` with the bag-of-words rows: {query: [(doc, score)]}."""
    from harness.retrieval.learned_sparse import SparseModel

    (root / "qrels").mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"_id": f"d{n}", "title": "", "text": " ".join(words)}) + "\n" for n, words in enumerate(docs)]
    (root / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    lines = [json.dumps({"_id": f"q{n}", "text": " ".join(words)}) + "\n" for n, words in enumerate(queries)]
    (root / "queries.jsonl").write_text("".join(lines), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n", encoding="utf-8")
    out = root / "run.trec"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SparseModel, "encode_docs", _bags)
        patch.setattr(SparseModel, "encode_queries", _bags)
        result = invoke(
            ["-q", "retrieve", str(root), "--model", str(model), "--passages", passages, "--passage-score", how]
            + ["--out", str(out), "--cache-dir", str(cache), "--top-k", str(depth)]
        )
    assert result.exit_code == 0, result.output
    run: dict[str, list] = {f"q{n}": [] for n in range(len(queries))}
    for line in out.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run[query_id].append((doc_id, float(score)))
    return run


def _sparse_brute(docs, queries, window: int, stride: int, how: str, depth: int):
    """Every passage of every document (one token a word: windows of words), scored as the words it shares with
    the query; a document scoring 0 is not retrieved; trec_eval's order, cut at `depth`."""
    run = {}
    for n, query in enumerate(queries):
        scores = {}
        for d, words in enumerate(docs):
            spans, start = [], 0
            while start + window < len(words):
                spans.append(words[start : start + window])
                start += stride
            own = [sum(passage.count(word) for word in query) for passage in [*spans, words[start:]]]
            scores[f"d{d}"] = {"maxp": max(own), "firstp": own[0], "sump": sum(own)}[how]
        ranked = sorted(((s, d) for d, s in scores.items() if s > 0), reverse=True)[:depth]
        run[f"q{n}"] = [(d, float(s)) for s, d in ranked]
    return run


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    docs=st.lists(st.lists(st.sampled_from(STEMS[:6]), min_size=1, max_size=10), min_size=1, max_size=7),
    queries=st.lists(st.lists(st.sampled_from(STEMS[:8]), min_size=1, max_size=2), min_size=2, max_size=4),
    window=st.integers(2, 4),
    overlap=st.integers(0, 1),
    how=st.sampled_from(["maxp", "firstp", "sump"]),
    depth=st.integers(1, 9),  # often more than the documents sharing a word with the query
)
def test_a_sparse_encoder_ranks_passages_as_the_brute_force_loop_in_small_chunks_and_query_blocks(
    sparse_model, docs, queries, window, overlap, how, depth
):
    import tempfile

    stride = window - overlap
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr("harness.pipeline.dense.passages.SPLIT_DOCS", 2)  # documents split two at a time
        patch.setattr("harness.pipeline.dense.passages.QUERY_BLOCK", 1)  # each query its own block
        got = _sparse_run(Path(tmp), sparse_model, docs, queries, f"{window}:{stride}", how, depth, Path(tmp) / "c")
    assert got == _sparse_brute(docs, queries, window, stride, how, depth)


def test_another_stride_over_one_sparse_cache_ranks_as_a_fresh_run(sparse_model, tmp_path):
    # 12 words: 8:4 and 8:8 both make two passages of d0, but not the same second one
    docs = [["apple"] * 4 + ["kiwi"] * 8, ["kiwi", "fig", "apple", "kiwi"], ["fig"] * 3 + ["kiwi"] * 9]
    queries = [["kiwi"], ["apple", "fig"]]
    cache = tmp_path / "cache"
    for n, (stride, how) in enumerate([(4, "maxp"), (8, "maxp"), (8, "sump"), (4, "sump")]):
        got = _sparse_run(tmp_path / f"data{n}", sparse_model, docs, queries, f"8:{stride}", how, 3, cache)
        assert got == _sparse_brute(docs, queries, 8, stride, how, 3), (stride, how)
