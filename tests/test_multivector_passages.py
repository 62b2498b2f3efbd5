"""Long documents as passages for a multi-vector (late-interaction) model (``--passages``): every passage scored by
exact MaxSim and each document by maxp, firstp or sump, against a brute-force loop written here over passages split
by a hand rule and encoded by sentence-transformers' own ``MultiVectorEncoder``; passages cached by their text, the
run's identity, and bad settings refused in one line before anything is encoded (tiny random-weight models built
here: tests/tiny_models.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Each word is one token of the tiny models' vocabulary, so a window of N tokens is N words (checked below).
WORDS = "apple banana cherry date zucchini fruit stone fig elder grape kiwi lemon melon olive pear plum".split()
TITLES = ["", "fruit", "stone fruit"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """MaxSim and MeanMaxSim models (32 tokens), and a MaxSim one whose saved ``document_length`` is 12."""
    from tiny_models import multi_vector_encoder

    root = tmp_path_factory.mktemp("tiny-late-passages")
    short = multi_vector_encoder(root / "short", WORDS, seed=7)
    config = short / "sentence_bert_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "document_length": 12}))
    return {
        "maxsim": multi_vector_encoder(root / "mv", WORDS, seed=1),
        "mean": multi_vector_encoder(root / "mv-mean", WORDS, similarity="meanmaxsim", seed=3),
        "short": short,
    }


def _hand_split(title: str, words: list[str], window: int, stride: int) -> list[str]:
    """The documented rule for one-token words: a document of at most `window` words is its own text; else windows
    of `window` words, each `stride` words after the last, the last reaching the end; the title opens each."""
    if len(words) <= window:
        return [(title + " " + " ".join(words)).strip()]
    spans, start = [], 0
    while start + window < len(words):
        spans.append(words[start : start + window])
        start += stride
    spans.append(words[start:])
    return [(title + " " + " ".join(span)).strip() for span in spans]


def _maxsim(query: np.ndarray, passage: np.ndarray, mean: bool) -> float:
    """Σ_i max_j q_i · d_j in float64 (a passage with no token: -1e9), divided by the query's tokens for
    MeanMaxSim, as float32."""
    if len(passage) == 0:
        total = -1e9
    else:
        total = 0.0
        for q_token in np.asarray(query, dtype=np.float64):
            total += max(float(np.dot(q_token, d_token)) for d_token in np.asarray(passage, dtype=np.float64))
    if mean and len(query):
        total /= len(query)
    return float(np.float32(total))


def _aggregate(scores: list[float], how: str) -> float:
    """maxp: the best; firstp: the first; sump: the sum in float64, in passage order, as float32."""
    total = 0.0
    for score in scores:
        total += score
    return float(np.float32({"maxp": max(scores), "firstp": scores[0], "sump": total}[how]))


def _ranked(scores: dict[str, float], depth: int) -> list[tuple[str, float]]:
    """docs/conventions.md's order: score (float32) descending, then doc_id descending; the first `depth`."""
    return sorted(scores.items(), key=lambda item: (np.float32(item[1]), item[0]), reverse=True)[:depth]


def _brute_force(queries, docs: dict[str, list], depth: int, how: str, mean: bool) -> list[list[tuple[str, float]]]:
    """Each query's top `depth` documents, `docs` mapping each doc_id to its passages' token matrices."""
    return [
        _ranked({doc_id: _aggregate([_maxsim(q, p, mean) for p in own], how) for doc_id, own in docs.items()}, depth)
        for q in queries
    ]


def _expected(model: Path, corpus, queries: list[str], window: int, stride: int, how: str, depth: int, mean: bool):
    """The loop over sentence-transformers' own ``encode_query`` / ``encode_document`` token vectors of the passages
    split by `_hand_split`, as float16 (the embedding store's dtype)."""
    from sentence_transformers import MultiVectorEncoder

    encoder = MultiVectorEncoder(str(model), device="cpu")
    split = {doc_id: _hand_split(title, words, window, stride) for doc_id, title, words in corpus}
    texts = [text for own in split.values() for text in own]
    matrices = iter([m.numpy().astype(np.float16) for m in encoder.encode_document(texts)])
    docs = {doc_id: [next(matrices) for _ in own] for doc_id, own in split.items()}
    query_vectors = [m.numpy().astype(np.float16) for m in encoder.encode_query(queries)]
    return _brute_force(query_vectors, docs, depth, how, mean), split


def _beir(root: Path, corpus, queries: list[str]) -> Path:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as out:
        for doc_id, title, words in corpus:
            out.write(json.dumps({"_id": doc_id, "title": title, "text": " ".join(words)}) + "\n")
    with (root / "queries.jsonl").open("w") as out:
        for i, text in enumerate(queries):
            out.write(json.dumps({"_id": f"q{i}", "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"q{i}\t{corpus[i % len(corpus)][0]}\t1" for i in range(len(queries))]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


def _evaluate(folder: Path, out: Path, model: Path, *options: str):
    args = ["-q", "evaluate", str(folder), "--model", str(model), "--output-dir", str(out), "--json"]
    return invoke([*args, *(options if "--cache-dir" in options else ("--no-cache", *options))])


def _run_file(folder: Path) -> dict[str, list[tuple[str, float]]]:
    """The written run's (doc_id, score) per query, in the file's order."""
    (path,) = folder.glob("*/*/test*.run.trec")
    got: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        got.setdefault(query_id, []).append((doc_id, float(score)))
    return got


def _assert_run_is(got: dict[str, list[tuple[str, float]]], expected) -> None:
    for i, hits in enumerate(expected):
        assert [doc_id for doc_id, _ in got.get(f"q{i}", [])] == [doc_id for doc_id, _ in hits]
        assert [score for _, score in got[f"q{i}"]] == pytest.approx([score for _, score in hits], rel=1e-6, abs=1e-6)


def test_each_word_is_one_token_of_the_tiny_models(models):
    """The premise of `_hand_split`: the model's own tokenizer reads each word as one token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(models["maxsim"]))
    assert [len(tokenizer(word, add_special_tokens=False)["input_ids"]) for word in WORDS] == [1] * len(WORDS)


# --- end to end against the brute-force loop ------------------------------------------------------------------------

_WORDS = st.lists(st.sampled_from(WORDS), min_size=1, max_size=14)


@st.composite
def _collections(draw):
    """Documents of 1-14 words (some one passage, some many), copies of earlier ones (ties under every score) and
    ones that open as an earlier one does (ties under firstp), under shuffled ids; 1-3 queries; a window of 2-5
    tokens and a stride up to it; a chunk size down to one passage, and maybe the smallest blocks a budget allows."""
    corpus = []
    for _ in range(draw(st.integers(2, 8))):
        how = draw(st.sampled_from(["new", "new", "copy", "same-start"])) if corpus else "new"
        if how == "new":
            corpus.append([draw(st.sampled_from(TITLES)), draw(_WORDS)])
        else:
            title, words = corpus[draw(st.integers(0, len(corpus) - 1))]
            corpus.append([title, list(words) if how == "copy" else words[:5] + draw(_WORDS)])
    ids = draw(st.permutations([f"d{i:02d}" for i in range(len(corpus))]))
    corpus = [(doc_id, title, words) for doc_id, (title, words) in zip(ids, corpus)]
    queries = [" ".join(words) for words in draw(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1, max_size=3))]  # fmt: skip
    window = draw(st.integers(2, 5))
    shape = {
        "window": window,
        "stride": draw(st.integers(1, window)),
        "how": draw(st.sampled_from(["maxp", "firstp", "sump"])),
        "depth": draw(st.integers(1, len(corpus) + 1)),
        "chunk": draw(st.sampled_from([1, 3, 256])),
        "small_blocks": draw(st.booleans()),
        "model": draw(st.sampled_from(["maxsim", "mean"])),
    }
    return corpus, queries, shape


@settings(
    derandomize=True,
    deadline=None,
    max_examples=12,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(_collections())
def test_a_passages_run_equals_the_brute_force_loop_over_every_passage(models, tmp_path_factory, collection):
    from harness.pipeline.dense import multivector as stage
    from harness.retrieval.index import multivector
    from harness.retrieval.streamed import resident_bytes

    corpus, queries, shape = collection
    root = tmp_path_factory.mktemp("collection")
    folder = _beir(root / "data", corpus, queries)
    window, stride, how = shape["window"], shape["stride"], shape["how"]
    options = ["--passages", f"{window}:{stride}", "--passage-score", how, "--top-k", str(shape["depth"])]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stage, "ENCODE_CHUNK", shape["chunk"])  # passages a chunk holds (whole documents)
        if shape["small_blocks"]:  # blocks of one query and about 32 passage tokens
            patch.setattr(multivector, "MAX_WORKING_BYTES", 4096)
            options += ["--memory-budget", str(resident_bytes() + (1 << 30))]
        result = _evaluate(folder, root / "r", models[shape["model"]], "--k", "1", *options)
    assert result.exit_code == 0, result.stderr
    expected, split = _expected(
        models[shape["model"]], corpus, queries, window, stride, how, shape["depth"], shape["model"] == "mean"
    )
    _assert_run_is(_run_file(root / "r"), expected)
    data = json.loads(result.stdout)
    recorded = data["config"]["passages"]
    assert (recorded["n_passages"], recorded["docs_split"]) == (
        sum(len(own) for own in split.values()),
        sum(len(own) > 1 for own in split.values()),
    )
    assert (recorded["window"], recorded["stride"], recorded["score"]) == (window, stride, how)
    assert data["variant"].startswith(f"{how}{window}" + (f"s{stride}" if stride != window else "") + "_top")
    assert data["config"]["pairs_scored_float64"] == len(queries) * recorded["n_passages"]


def test_the_best_passage_is_not_always_the_first_and_each_score_ranks_as_its_loop(models, tmp_path):
    """Long documents of many passages: maxp and firstp disagree on the ranking, and each of the three is its loop."""
    rng = np.random.default_rng(11)
    corpus = [(f"d{i}", TITLES[i % 3], [str(w) for w in rng.choice(WORDS, size=12)]) for i in range(6)]
    queries = ["kiwi lemon", "stone fig plum", "pear"]
    folder = _beir(tmp_path / "data", corpus, queries)
    rankings = {}
    for how in ("maxp", "firstp", "sump"):
        result = _evaluate(folder, tmp_path / how, models["maxsim"], "--passages", "3", "--passage-score", how)
        assert result.exit_code == 0, result.stderr
        expected, _ = _expected(models["maxsim"], corpus, queries, 3, 3, how, 10, False)
        _assert_run_is(_run_file(tmp_path / how), expected)
        rankings[how] = [[doc_id for doc_id, _ in hits] for hits in expected]
    assert rankings["maxp"] != rankings["firstp"]


# --- the search alone, on token vectors whose sums are exact ---------------------------------------------------------

_VALUE = st.integers(-4, 4).map(lambda n: n / 4)  # quarter steps: every product and sum exact, ties exact


@st.composite
def _token_corpora(draw):
    dim = draw(st.integers(1, 3))
    matrix = lambda rows: np.array(  # noqa: E731
        draw(st.lists(st.lists(_VALUE, min_size=dim, max_size=dim), min_size=rows, max_size=rows)), dtype=np.float32
    ).reshape(rows, dim)
    queries = [matrix(draw(st.integers(0, 3))) for _ in range(draw(st.integers(1, 3)))]  # 0: a query without a token
    docs = []
    for _ in range(draw(st.integers(1, 10))):
        if docs and draw(st.booleans()):  # a copy of an earlier document: a tie under every score
            docs.append([p.copy() for p in docs[draw(st.integers(0, len(docs) - 1))]])
        else:
            docs.append([matrix(draw(st.integers(0, 4))) for _ in range(draw(st.integers(1, 4)))])  # 0: no token
    ids = list(draw(st.permutations([f"d{i:02d}" for i in range(len(docs))])))
    return queries, dict(zip(ids, docs)), draw(st.integers(1, len(docs) + 1))


@settings(derandomize=True, deadline=None, max_examples=150)
@given(
    _token_corpora(),
    st.sampled_from(["maxp", "firstp", "sump"]),
    st.booleans(),
    st.integers(1, 6),
    st.integers(1, 8),
    st.integers(1, 4),
)
def test_passage_maxsim_equals_the_loop_in_any_blocks_and_chunks(corpus, how, mean, doc_tokens, query_tokens, chunks):
    from harness.retrieval.index.multivector import PassageMaxSim

    queries, docs, depth = corpus
    expected = _brute_force(queries, docs, depth, how, mean)
    search = PassageMaxSim([f"q{i}" for i in range(len(queries))], queries, depth, how, mean, query_tokens, doc_tokens)
    ids = list(docs)
    for part in np.array_split(np.arange(len(ids)), chunks):  # chunks of whole documents
        chunk = [ids[i] for i in part.tolist()]
        starts = np.cumsum([0] + [len(docs[d]) for d in chunk[:-1]]).tolist() if chunk else []
        search.add(chunk, starts, [p for d in chunk for p in docs[d]])
    run = search.run()
    for i, hits in enumerate(expected):
        assert [(hit.doc_id, hit.score) for hit in run[f"q{i}"]] == hits


# --- the cache and the result's identity ----------------------------------------------------------------------------

CORPUS = [
    ("d1", "", "apple banana cherry date fig grape".split()),
    ("d2", "", "apple banana cherry kiwi lemon".split()),  # opens with d1's first passage at a window of 3
    ("d3", "fruit", "plum pear".split()),  # one window: its own text
]
QUERIES = ["cherry date", "kiwi", "pear plum"]


@pytest.fixture
def encoded(monkeypatch) -> list[tuple[str, str]]:
    """Every (role, text) the model is asked to encode."""
    from harness.retrieval.index import multivector

    seen: list[tuple[str, str]] = []
    original = multivector.MultiVectorModel.encode
    monkeypatch.setattr(
        multivector.MultiVectorModel,
        "encode",
        lambda self, texts, role: seen.extend((role, text) for text in texts) or original(self, texts, role),
    )
    return seen


def test_each_passage_text_is_encoded_once_and_a_rerun_encodes_nothing(models, tmp_path, encoded):
    folder = _beir(tmp_path / "data", CORPUS, QUERIES)
    cache = ("--cache-dir", str(tmp_path / "cache"), "--passages", "3")
    first = _evaluate(folder, tmp_path / "first", models["maxsim"], *cache)
    assert first.exit_code == 0, first.stderr
    docs = sorted(text for role, text in encoded if role == "document")
    # d1 and d2 share "apple banana cherry": encoded once
    assert docs == sorted(["apple banana cherry", "date fig grape", "kiwi lemon", "fruit plum pear"])
    data = json.loads(first.stdout)
    assert data["config"]["embedding_cache"] == "stored" and data["config"]["passages"]["n_passages"] == 5
    assert data["cost"]["vectors"]["docs_encoded"] == 4

    encoded.clear()
    again = _evaluate(folder, tmp_path / "again", models["maxsim"], *cache)
    assert again.exit_code == 0, again.stderr
    again_data = json.loads(again.stdout)
    assert encoded == [] and again_data["config"]["embedding_cache"] == "hit"
    assert again_data["cost"]["vectors"]["docs_encoded"] == 0 and again_data["cost"]["vectors"]["docs_cached"] == 5
    assert _run_file(tmp_path / "again") == _run_file(tmp_path / "first")
    assert again_data["metrics"] == data["metrics"]

    # without passages: d3, one window, is the same text and comes from the store; d1 and d2 are encoded whole
    encoded.clear()
    plain = _evaluate(folder, tmp_path / "plain", models["maxsim"], "--cache-dir", str(tmp_path / "cache"))
    assert plain.exit_code == 0, plain.stderr
    assert sorted(text for role, text in encoded if role == "document") == [
        " ".join(CORPUS[0][2]),
        " ".join(CORPUS[1][2]),
    ]


def test_runs_with_and_without_passages_and_with_two_windows_keep_distinct_results(models, tmp_path):
    folder = _beir(tmp_path / "data", CORPUS, QUERIES)
    out = tmp_path / "r"
    variants = {}
    for options in ((), ("--passages", "3"), ("--passages", "4"), ("--passages", "3", "--passage-score", "sump")):
        result = _evaluate(folder, out, models["maxsim"], "--k", "1,3", *options)
        assert result.exit_code == 0, result.stderr
        data = json.loads(result.stdout)
        variants[options] = (data["variant"], data["config_hash"])
        assert ("passages" in data["config"]) == bool(options)
    assert len({variant for variant, _ in variants.values()}) == len({digest for _, digest in variants.values()}) == 4
    assert variants[()][0] == "" and variants[("--passages", "3")][0].startswith("maxp3")
    written = {json.loads(path.read_text())["config_hash"] for path in out.glob("*/*/test*.json")}
    assert written == {digest for _, digest in variants.values()}  # none served or overwritten by another


def test_the_identity_records_passages_only_when_given(models):
    from dataclasses import replace

    from harness.pipeline.evaluate import EvaluateConfig, configuration
    from harness.retrieval.index.passages import PassageSpec

    config = EvaluateConfig(dataset_path=Path("/nonexistent"), model=str(models["maxsim"]))
    plain = configuration(config, "scifact")
    assert "passages" not in plain.changed
    hashes = {plain.config_hash}
    for spec in (PassageSpec(128), PassageSpec(256), PassageSpec(128, 64), PassageSpec(128, score="firstp")):
        with_passages = configuration(replace(config, passages=spec), "scifact")
        assert with_passages.changed["passages"] == spec.to_config()
        hashes.add(with_passages.config_hash)
    assert len(hashes) == 5


# --- bad settings ---------------------------------------------------------------------------------------------------

BAD = {
    "window-longer-than-the-document-length": (
        "short",
        ["--passages", "16"],
        "--passages window 16 is longer than the 12 tokens the model reads; use a window of at most 12",
    ),
    "window-longer-than-the-model": ("maxsim", ["--passages", "64"], "window 64 is longer than the 32 tokens"),
    "stride-0": ("maxsim", ["--passages", "8:0"], "--passages stride must be at least 1 token"),
    "window-0": ("maxsim", ["--passages", "0"], "--passages window must be at least 1 token"),
    "stride-longer-than-window": ("maxsim", ["--passages", "4:8"], "stride 8 is longer than the window 4"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_passage_setting_for_a_multi_vector_model_is_one_line_before_anything_is_encoded(
    case, models, tmp_path, encoded
):
    which, options, message = BAD[case]
    folder = _beir(tmp_path / "data", CORPUS, QUERIES)
    result = _evaluate(folder, tmp_path / "r", models[which], "--cache-dir", str(tmp_path / "cache"), *options)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(re.escape(message), lines[0]), result.stderr
    assert encoded == []
    assert not (tmp_path / "r").exists() and not (tmp_path / "cache").exists()


def test_the_short_models_document_length_is_what_it_reads(models):
    """The refusal's premise: the saved ``document_length`` is the model's own truncation of a document."""
    from sentence_transformers import MultiVectorEncoder

    from harness.retrieval.index.multivector import document_length

    encoder = MultiVectorEncoder(str(models["short"]), device="cpu")
    assert len(encoder.encode_document([" ".join(WORDS * 3)])[0]) <= 12 == document_length(str(models["short"]))
    assert document_length(str(models["maxsim"])) == 32
