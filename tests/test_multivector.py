"""Late interaction: a multi-vector (MultiVectorEncoder) folder is its own kind of system, searched by exact MaxSim
in a memory budget; its runs equal a brute-force MaxSim loop written here and its metrics sentence-transformers' own
multi-vector information-retrieval evaluator, on tiny random-weight models built here (tests/tiny_models.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

WORDS = "apple banana cherry date zucchini fruit stone fig elder grape kiwi lemon melon olive pear plum".split()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Tiny late-interaction models: token vectors normalized (MaxSim), raw (negative similarities: a padding
    token must never win a max), and MeanMaxSim; a bi-encoder of the same words beside them."""
    from tiny_models import bi_encoder, multi_vector_encoder

    root = tmp_path_factory.mktemp("tiny-multi-vector")
    return {
        "maxsim": multi_vector_encoder(root / "mv", WORDS, seed=1),
        "raw": multi_vector_encoder(root / "mv-raw-vectors", WORDS, normalize=False, seed=2),
        "mean": multi_vector_encoder(root / "mv-mean", WORDS, similarity="meanmaxsim", seed=3),
        "dense": bi_encoder(root / "dense", WORDS, seed=4),
    }


def _brute_force(queries, docs, doc_ids, depth, mean=False) -> list[list[tuple[str, float]]]:
    """Each query's top `depth`, one (query, document) pair at a time: Σ_i max_j q_i · d_j in float64 (over the
    query's tokens; a document with no token at -1e9), divided by the query's tokens for MeanMaxSim, as float32;
    ranked by score, then doc_id, descending (trec_eval's order)."""
    ranked = []
    for query in queries:
        scored = []
        for doc_id, doc in zip(doc_ids, docs):
            if len(doc) == 0:
                total = -1e9
            else:
                total = 0.0
                for q_token in np.asarray(query, dtype=np.float64):
                    total += max(float(np.dot(q_token, d_token)) for d_token in np.asarray(doc, dtype=np.float64))
            if mean and len(query):
                total /= len(query)
            scored.append((float(np.float32(total)), doc_id))
        scored.sort(reverse=True)
        ranked.append([(doc_id, score) for score, doc_id in scored[:depth]])
    return ranked


# Token vectors of quarter steps in [-1, 1]: every product and sum is exact in float32 and float64, so documents
# that tie tie exactly, and a ranking decided by the tie rule is tested as such.
_VALUE = st.integers(-4, 4).map(lambda n: n / 4)


@st.composite
def _corpora(draw):
    dim = draw(st.integers(1, 4))
    matrix = lambda rows: np.array(  # noqa: E731
        draw(st.lists(st.lists(_VALUE, min_size=dim, max_size=dim), min_size=rows, max_size=rows)), dtype=np.float32
    ).reshape(rows, dim)
    queries = [matrix(draw(st.integers(1, 4))) for _ in range(draw(st.integers(1, 4)))]
    docs = []
    for _ in range(draw(st.integers(1, 14))):
        if docs and draw(st.booleans()):  # a copy of an earlier document, maybe with a token more: a tie
            doc = docs[draw(st.integers(0, len(docs) - 1))]
            docs.append(np.vstack([doc, doc[:1]]) if len(doc) and draw(st.booleans()) else doc.copy())
        else:
            docs.append(matrix(draw(st.integers(0, 5))))  # 0: a document without a token
    doc_ids = draw(st.permutations([f"d{i:02d}" for i in range(len(docs))]))
    return queries, docs, list(doc_ids), draw(st.integers(1, len(docs) + 1)), draw(st.booleans())


@settings(derandomize=True, deadline=None, max_examples=80)
@given(_corpora(), st.integers(1, 12), st.integers(1, 8))
def test_maxsim_search_equals_the_brute_force_loop_in_any_blocks(corpus, doc_tokens, query_tokens):
    from harness.retrieval.index.multivector import MaxSimSearch

    queries, docs, doc_ids, depth, mean = corpus
    expected = _brute_force(queries, docs, doc_ids, depth, mean)
    whole = MaxSimSearch([f"q{i}" for i in range(len(queries))], queries, depth, mean)
    whole.add(doc_ids, docs)
    # The smallest blocks the planner allows (one document, one query), and the corpus in two calls, reversed.
    blocked = MaxSimSearch([f"q{i}" for i in range(len(queries))], queries, depth, mean, query_tokens, doc_tokens)
    half = len(docs) // 2
    blocked.add(doc_ids[half:][::-1], docs[half:][::-1])
    blocked.add(doc_ids[:half], docs[:half])
    for search in (whole, blocked):
        run = search.run()
        for i, hits in enumerate(expected):
            got = [(hit.doc_id, hit.score) for hit in run[f"q{i}"]]
            assert got == hits


@settings(derandomize=True, deadline=None, max_examples=25)
@given(_corpora())
def test_half_precision_token_vectors_search_as_the_brute_force_loop_over_them(corpus):
    """float16 token vectors (the store's) are exact in float32: the search over them is the loop over them."""
    from harness.retrieval.index.multivector import MaxSimSearch

    queries, docs, doc_ids, depth, mean = corpus
    rng = np.random.default_rng(len(docs))
    docs = [(doc + rng.normal(0, 0.01, doc.shape)).astype(np.float16) for doc in docs]  # no longer exact sums
    search = MaxSimSearch([f"q{i}" for i in range(len(queries))], queries, depth, mean, 2, 3)
    search.add(doc_ids, docs)
    for i, hits in enumerate(_brute_force(queries, docs, doc_ids, depth, mean)):
        assert [(hit.doc_id, hit.score) for hit in search.run()[f"q{i}"]] == hits


def _beir(root: Path, texts: list[str], queries: list[str], qrels: dict[str, dict[str, int]]) -> Path:
    root.mkdir(parents=True)
    (root / "qrels").mkdir()
    with (root / "corpus.jsonl").open("w") as out:
        for i, text in enumerate(texts):
            out.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with (root / "queries.jsonl").open("w") as out:
        for i, text in enumerate(queries):
            out.write(json.dumps({"_id": f"q{i}", "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{grade}" for q, judged in qrels.items() for d, grade in judged.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


def _evaluate(folder: Path, out: Path, model: Path, *options: str):
    args = ["-q", "evaluate", str(folder), "--model", str(model), "--output-dir", str(out), "--json"]
    return invoke([*args, *(options if "--cache-dir" in options else ("--no-cache", *options))])


_TEXT = st.lists(st.sampled_from(WORDS), min_size=1, max_size=9).map(" ".join)


@st.composite
def _collections(draw):
    texts = draw(st.lists(_TEXT, min_size=3, max_size=12, unique=True))  # distinct texts: no exact score ties
    queries = draw(st.lists(_TEXT, min_size=1, max_size=4))
    qrels = {}
    for q in range(len(queries)):
        relevant = draw(st.sets(st.integers(0, len(texts) - 1), min_size=1, max_size=3))
        qrels[f"q{q}"] = {f"d{d}": 1 for d in relevant}
    return texts, queries, qrels


@settings(
    derandomize=True,
    deadline=None,
    max_examples=8,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(_collections(), st.sampled_from(["maxsim", "raw", "mean"]))
def test_a_multi_vector_run_equals_the_brute_force_loop_and_sentence_transformers_evaluator(
    models, tmp_path_factory, collection, which
):
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.multi_vector_encoder.evaluation.information_retrieval import (
        MultiVectorInformationRetrievalEvaluator,
    )

    texts, queries, qrels = collection
    root = tmp_path_factory.mktemp("collection")
    folder = _beir(root / "data", texts, queries, qrels)
    result = _evaluate(folder, root / "r", models[which], "--k", "1,3,10", "--top-k", "10")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["config"]["kind"] == "multi-vector"

    model = MultiVectorEncoder(str(models[which]), device="cpu")
    # the loop over the token vectors as the embedding store keeps them: float16
    doc_vectors = [m.numpy().astype(np.float16) for m in model.encode_document(texts)]
    query_vectors = [m.numpy().astype(np.float16) for m in model.encode_query(queries)]
    expected = _brute_force(query_vectors, doc_vectors, [f"d{i}" for i in range(len(texts))], 10, which == "mean")
    (run_file,) = (root / "r").glob("*/*/test*.run.trec")
    got: dict[str, list[str]] = {}
    for line in run_file.read_text().splitlines():
        query_id, _, doc_id, _, _, _ = line.split()
        got.setdefault(query_id, []).append(doc_id)
    for i, hits in enumerate(expected):
        assert got[f"q{i}"] == [doc_id for doc_id, _ in hits]

    evaluator = MultiVectorInformationRetrievalEvaluator(
        {f"q{i}": text for i, text in enumerate(queries)},
        {f"d{i}": text for i, text in enumerate(texts)},
        {q: set(judged) for q, judged in qrels.items()},
        mrr_at_k=[10],
        ndcg_at_k=[3, 10],
        accuracy_at_k=[1, 3],
        precision_recall_at_k=[1, 3, 10],
        map_at_k=[10],
        write_csv=False,
    )
    theirs = {key.split("_", 1)[1]: value for key, value in evaluator(model).items()}
    ours = data["metrics"]
    pairs = {"nDCG@3": "ndcg@3", "nDCG@10": "ndcg@10", "MRR@10": "mrr@10", "Recall@10": "recall@10"}
    pairs |= {"P@1": "precision@1", "P@3": "precision@3", "Success@1": "accuracy@1", "Success@3": "accuracy@3"}
    pairs["MAP@10"] = "map@10"  # sentence-transformers divides by min(10, relevant): at most 3 here, as trec_eval
    for mine, st_name in pairs.items():
        assert ours[mine] == pytest.approx(theirs[st_name], abs=1e-6), mine


def test_a_multi_vector_folder_is_its_own_kind_and_the_single_vector_loader_refuses_it(models):
    from harness.errors import ModelLoadError
    from harness.pipeline.systems import parse_system
    from harness.retrieval.sentence_transformer import load_sentence_transformer

    for which in ("maxsim", "raw", "mean"):
        assert parse_system(str(models[which])).kind.name == "multi-vector"
        assert parse_system(f"late={models[which]}").kind.name == "multi-vector"
    assert parse_system(str(models["dense"])).kind.name == "dense"
    assert parse_system(f"rrf(bm25, {models['maxsim']})").members[1].kind.name == "multi-vector"
    with pytest.raises(ModelLoadError, match="multi-vector .* not a single-vector one"):
        load_sentence_transformer(str(models["maxsim"]))


def test_token_vectors_are_kept_in_the_embedding_store_and_a_rerun_encodes_nothing(
    models, tiny_beir, tmp_path, monkeypatch
):
    from harness.retrieval.index import multivector

    cache = ["--cache-dir", str(tmp_path / "cache")]
    first = _evaluate(tiny_beir, tmp_path / "first", models["maxsim"], *cache)
    assert first.exit_code == 0, first.stderr
    first_data = json.loads(first.stdout)
    assert first_data["config"]["embedding_cache"] == "stored"
    assert first_data["config"]["token_dtype"] == "float16"
    assert first_data["cost"]["vectors"]["docs_encoded"] == first_data["config"]["n_docs"]
    assert any((tmp_path / "cache" / "texts").rglob("*.offsets.npy"))  # a ragged store: a matrix per text

    encoded = []
    monkeypatch.setattr(multivector.MultiVectorModel, "encode", lambda self, texts, role: encoded.append(role))
    again = _evaluate(tiny_beir, tmp_path / "again", models["maxsim"], *cache)
    assert again.exit_code == 0, again.stderr
    again_data = json.loads(again.stdout)
    assert encoded == [] and again_data["config"]["embedding_cache"] == "hit"
    assert again_data["cost"]["vectors"]["docs_encoded"] == 0 and again_data["cost"]["vectors"]["queries_encoded"] == 0
    runs = [next(path.glob("*/*/test*.run.trec")).read_text() for path in (tmp_path / "first", tmp_path / "again")]
    assert runs[0] == runs[1] and again_data["metrics"] == first_data["metrics"]


def test_a_pylate_or_stanford_colbert_save_is_recognised(tmp_path):
    from harness.retrieval.index.multivector import is_multi_vector_folder

    pylate, stanford, plain = tmp_path / "pylate", tmp_path / "stanford", tmp_path / "plain"
    for folder in (pylate, stanford, plain):
        folder.mkdir()
    (pylate / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "ColBERT"}))
    (stanford / "config.json").write_text(json.dumps({"architectures": ["HF_ColBERT"]}))
    (plain / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    assert is_multi_vector_folder(pylate) and is_multi_vector_folder(stanford)
    assert not is_multi_vector_folder(plain) and not is_multi_vector_folder(tmp_path / "absent")


def test_a_small_memory_budget_searches_in_small_blocks_and_returns_the_same_run(models, tmp_path, monkeypatch):
    """The same run whether the corpus is scored in one block or in blocks of a document or two (the working set a
    budget allows held to 4 KiB, so a block holds one query and about 32 document tokens: what a budget just above
    the minimum leaves on a large corpus)."""
    from harness.retrieval.index import multivector
    from harness.retrieval.streamed import resident_bytes

    folder = _beir(
        tmp_path / "data",
        [" ".join(WORDS[i : i + 5]) for i in range(12)] + ["apple fig", "apple fig"],
        ["apple fig", "kiwi plum melon"],
        {"q0": {"d0": 1}, "q1": {"d9": 1, "d10": 1}},
    )
    wide = _evaluate(folder, tmp_path / "wide", models["raw"], "--k", "1,3", "--top-k", "5")
    assert wide.exit_code == 0, wide.stderr
    monkeypatch.setattr(multivector, "MAX_WORKING_BYTES", 4096)
    budget = str(resident_bytes() + (1 << 30))
    narrow = _evaluate(
        folder, tmp_path / "narrow", models["raw"], "--k", "1,3", "--top-k", "5", "--memory-budget", budget
    )
    assert narrow.exit_code == 0, narrow.stderr
    wide_config, narrow_config = json.loads(wide.stdout)["config"], json.loads(narrow.stdout)["config"]
    assert narrow_config["memory_budget_source"] == "option"
    assert wide_config["search_blocks"] == 1 and narrow_config["search_blocks"] >= 3
    runs = [next(path.glob("*/*/test*.run.trec")).read_text() for path in (tmp_path / "wide", tmp_path / "narrow")]
    assert runs[0] == runs[1]


def test_the_blocks_shrink_with_the_budget_and_a_budget_below_the_minimum_is_refused():
    from harness.retrieval.index.multivector import plan_blocks
    from harness.retrieval.streamed import MemoryBudgetError

    shapes = dict(query_tokens=3000, longest_query=32, longest_doc=256, dimension=128, n_queries=300, depth=100)
    large = plan_blocks(8 << 30, base=1 << 30, **shapes)
    small = plan_blocks(large.minimum + (8 << 20), base=1 << 30, **shapes)
    assert small.doc_tokens < large.doc_tokens and small.doc_tokens >= 256
    with pytest.raises(MemoryBudgetError, match="memory.budget.* too small .* raise it to"):
        plan_blocks(large.minimum - 1, base=1 << 30, **shapes)


@pytest.mark.parametrize(
    "options, named",
    [
        pytest.param(["--embedding-precision", "int8"], "--embedding-precision applies to", id="embedding-precision"),
        pytest.param(["--truncate-dim", "16"], "--truncate-dim applies to", id="truncate-dim"),
        pytest.param(["--index", "hnsw"], "--index hnsw does not apply to a multi-vector model", id="index"),
        pytest.param(
            ["--query-prefix", "query: "],
            "--query-prefix .query: . does not apply to a multi-vector model: its own settings",
            id="query-prefix",
        ),
        pytest.param(["--max-seq-length", "16"], "--max-seq-length 16 does not apply", id="max-seq-length"),
        pytest.param(["--backend", "onnx"], "--backend 'onnx' does not apply", id="backend"),
        pytest.param(["--similarity", "dot"], "--normalize False does not apply", id="normalize"),
        pytest.param(["--precision", "bf16"], "--precision 'bf16' does not apply", id="precision"),
        pytest.param(
            ["--memory-budget", "1MB"], "--memory-budget .* too small for a MaxSim search", id="memory-budget"
        ),
    ],
)
def test_an_option_that_means_nothing_for_a_multi_vector_model_is_one_line_before_encoding(
    models, tiny_beir, tmp_path, monkeypatch, options, named
):
    from harness.retrieval.index import multivector

    encoded = []
    original = multivector.MultiVectorModel.encode
    monkeypatch.setattr(
        multivector.MultiVectorModel,
        "encode",
        lambda self, texts, role: encoded.append(role) or original(self, texts, role),
    )
    result = _evaluate(tiny_beir, tmp_path / "r", models["maxsim"], *options)
    assert result.exit_code == (2 if options[0] == "--memory-budget" else 1)  # 2: a usage error
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and __import__("re").search(named, lines[0]), result.stderr
    assert "document" not in encoded  # refused before the corpus is encoded
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.json"))


def _run_file(folder: Path) -> dict[str, list[tuple[str, float]]]:
    """A written run's (doc_id, score) per query, in the file's order."""
    got: dict[str, list[tuple[str, float]]] = {}
    for line in next(folder.glob("*/*/test*.run.trec")).read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        got.setdefault(query_id, []).append((doc_id, float(score)))
    return got


def _expected(model_folder: Path, texts: list[str], queries: list[str], depth: int, mean: bool = False):
    """The brute-force loop over sentence-transformers' own ``encode_query`` / ``encode_document`` token vectors,
    as float16 (the embedding store's dtype)."""
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(model_folder), device="cpu")
    docs = [m.numpy().astype(np.float16) for m in model.encode_document(texts)]
    query_vectors = [m.numpy().astype(np.float16) for m in model.encode_query(queries)]
    return _brute_force(query_vectors, docs, [f"d{i}" for i in range(len(texts))], depth, mean)


def _assert_run_is(got: dict[str, list[tuple[str, float]]], expected) -> None:
    for i, hits in enumerate(expected):
        assert [doc_id for doc_id, _ in got[f"q{i}"]] == [doc_id for doc_id, _ in hits]
        assert [score for _, score in got[f"q{i}"]] == pytest.approx([score for _, score in hits], rel=1e-6, abs=1e-6)


def test_queries_and_documents_are_encoded_each_with_its_own_prompt(tmp_path):
    """A model whose query and document prompts differ: the run is the loop over sentence-transformers' own
    ``encode_query`` vectors of the queries against its ``encode_document`` vectors of the documents."""
    from tiny_models import multi_vector_encoder

    model = multi_vector_encoder(
        tmp_path / "prompted", WORDS, prompts={"query": "kiwi lemon melon ", "document": "stone "}, seed=5
    )
    texts = [" ".join(WORDS[i : i + 1 + i % 4]) for i in range(12)]
    queries = ["apple fig", "kiwi plum melon", "stone grape"]
    folder = _beir(tmp_path / "data", texts, queries, {"q0": {"d0": 1}, "q1": {"d9": 1}, "q2": {"d6": 1}})
    result = _evaluate(folder, tmp_path / "r", model, "--k", "1,3", "--top-k", "8")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["config"]["prompts"] == {"query": "kiwi lemon melon ", "document": "stone "}
    _assert_run_is(_run_file(tmp_path / "r"), _expected(model, texts, queries, 8))


@settings(derandomize=True, deadline=None, max_examples=6)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_written_scores_are_the_float64_maxsim_rounded_to_float32_bit_for_bit(seed, mean):
    """Wide token vectors and long texts, whose float32 sums round apart from the float64 ones: each score kept is
    the float64 MaxSim rounded once to float32, as the brute-force loop's, in whole and in small blocks."""
    from harness.retrieval.index.multivector import MaxSimSearch

    rng = np.random.default_rng(seed)
    queries = [rng.normal(size=(int(rng.integers(12, 24)), 96)).astype(np.float32) for _ in range(3)]
    docs = [rng.normal(size=(int(rng.integers(1, 40)), 96)).astype(np.float32) for _ in range(30)]
    doc_ids = [f"d{i:02d}" for i in range(len(docs))]
    expected = _brute_force(queries, docs, doc_ids, 10, mean)
    for blocks in ((1 << 30, 1 << 30), (24, 60)):
        search = MaxSimSearch(["q0", "q1", "q2"], queries, 10, mean, *blocks)
        search.add(doc_ids, docs)
        run = search.run()
        for i, hits in enumerate(expected):
            got = [(hit.doc_id, hit.score) for hit in run[f"q{i}"]]
            assert [np.float32(score).tobytes() for _, score in got] == [np.float32(s).tobytes() for _, s in hits]
            assert got == hits


def test_a_multi_vector_model_in_the_hugging_face_cache_is_refused_by_the_single_vector_loader(
    models, tmp_path, monkeypatch
):
    """Named by its hub id and found in the local Hugging Face cache (models--org--name/snapshots/REV), not as a
    folder: still recognised as multi-vector, and still refused where one vector per text is needed."""
    import shutil

    from huggingface_hub import constants

    from harness.errors import ModelLoadError
    from harness.pipeline.systems import parse_system
    from harness.retrieval.sentence_transformer import load_sentence_transformer

    hub = tmp_path / "hub"
    shutil.copytree(models["maxsim"], hub / "models--tiny-org--late-tiny" / "snapshots" / "0123abcd")
    (hub / "models--tiny-org--late-tiny" / "refs").mkdir()
    (hub / "models--tiny-org--late-tiny" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.chdir(tmp_path)  # no folder named tiny-org/late-tiny here: the hub id is only in the cache
    assert parse_system("tiny-org/late-tiny").kind.name == "multi-vector"
    with pytest.raises(ModelLoadError, match="tiny-org/late-tiny is a multi-vector .* not a single-vector one"):
        load_sentence_transformer("tiny-org/late-tiny")


def test_query_token_vectors_are_stored_with_the_queries_and_document_ones_with_the_documents(models, tmp_path):
    """Read the embedding store: the query store holds exactly the queries' texts, the document store exactly the
    documents' (none of the queries)."""
    from harness.io.cache.texts import TextStore, text_digests

    texts = [" ".join(WORDS[i : i + 3]) for i in range(8)]
    queries = ["apple fig", "kiwi plum melon"]  # no document's text
    folder = _beir(tmp_path / "data", texts, queries, {"q0": {"d0": 1}, "q1": {"d5": 1}})
    result = _evaluate(folder, tmp_path / "r", models["maxsim"], "--k", "1,3", "--cache-dir", str(tmp_path / "cache"))
    assert result.exit_code == 0, result.stderr
    stores = {}
    for inputs_file in (tmp_path / "cache" / "texts").glob("*/inputs.json"):
        inputs = json.loads(inputs_file.read_text())["inputs"]
        stores[inputs["kind"]] = TextStore(tmp_path / "cache", inputs)
        assert stores[inputs["kind"]].folder == inputs_file.parent
    assert set(stores) == {"doc", "query"}
    held = lambda kind, strings: stores[kind].holds(text_digests(strings)).tolist()  # noqa: E731
    assert held("query", queries) == [True, True] and held("query", texts) == [False] * len(texts)
    assert held("doc", queries) == [False, False]
    doc_keys = sum(len(np.load(path)) for path in stores["doc"].folder.glob("*.keys.npy"))
    query_keys = sum(len(np.load(path)) for path in stores["query"].folder.glob("*.keys.npy"))
    assert (doc_keys, query_keys) == (len(texts), len(queries))


def test_a_changed_prompt_encodes_the_texts_again(tmp_path):
    """The same weights under the same name with another saved prompt: the stored token vectors are not served;
    everything is encoded again and the run is the loop over the new prompt's vectors."""
    from tiny_models import multi_vector_encoder

    model = multi_vector_encoder(tmp_path / "late", WORDS, prompts={"query": "kiwi ", "document": "stone "}, seed=6)
    texts = [" ".join(WORDS[i : i + 2 + i % 3]) for i in range(10)]
    queries = ["apple fig", "kiwi plum melon"]
    folder = _beir(tmp_path / "data", texts, queries, {"q0": {"d0": 1}, "q1": {"d5": 1}})
    cache = ("--k", "1,3", "--top-k", "6", "--cache-dir", str(tmp_path / "cache"))
    first = _evaluate(folder, tmp_path / "first", model, *cache)
    assert first.exit_code == 0, first.stderr
    settings_file = model / "config_sentence_transformers.json"
    saved = json.loads(settings_file.read_text())
    saved["prompts"] = {"query": "lemon pear ", "document": "grape "}
    settings_file.write_text(json.dumps(saved))
    again = _evaluate(folder, tmp_path / "again", model, *cache)
    assert again.exit_code == 0, again.stderr
    data = json.loads(again.stdout)
    assert data["config"]["embedding_cache"] == "stored"
    assert data["cost"]["vectors"]["docs_encoded"] == len(texts)
    assert data["cost"]["vectors"]["queries_encoded"] == len(queries)
    _assert_run_is(_run_file(tmp_path / "again"), _expected(model, texts, queries, 6))


def test_a_refused_setting_is_refused_when_the_evaluation_is_handed_a_loaded_encoder(models, tiny_beir, tmp_path):
    """`evaluate_dataset` given a loaded encoder (bench's and the demo's path: the checks that find and load a model
    are skipped) still refuses, before anything is encoded, a setting a multi-vector model cannot honour."""
    from dataclasses import replace

    from harness.errors import HarnessError
    from harness.pipeline.config import EvaluateConfig
    from harness.pipeline.evaluate import evaluate_dataset
    from harness.retrieval.index import multivector
    from harness.retrieval.sentence_transformer import load_sentence_transformer
    from harness.runtimes.spec import EncoderSpec

    encoded = []
    original = multivector.MultiVectorModel.encode
    config = EvaluateConfig(
        dataset_path=tiny_beir,
        split="test",
        model=str(models["maxsim"]),
        k_values=(1, 3),
        output_dir=tmp_path / "r",
        cache=False,
    )
    encoder = load_sentence_transformer(str(models["dense"]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            multivector.MultiVectorModel,
            "encode",
            lambda self, texts, role: encoded.append(role) or original(self, texts, role),
        )
        for name, value in (("max_seq_length", 16), ("precision", "bf16"), ("normalize", False)):
            spec = replace(EncoderSpec(), **{name: value})
            with pytest.raises(HarnessError, match=f"`{name}` .* does not apply to a multi-vector model"):
                evaluate_dataset(replace(config, encoder=spec), encoder=encoder)
    assert encoded == [] and not (tmp_path / "r").exists()
