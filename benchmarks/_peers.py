"""The peers `benchmarks/suite.py` runs beside ours: qdrant's fastembed, on our ONNX export of the same model.

A module, not a benchmark (its name starts with ``_``). fastembed cannot reach a model hub here, so the model
is handed to it as a local custom model: `prepare_fastembed` writes the sentence-transformers model's
transformer as ONNX (`harness.runtimes.onnx_backend.export`, fp32, at ``onnx/model.onnx``, fastembed's default
path) beside the tokenizer files the model ships, and reads the pooling and normalization from the model's own
modules; `load_fastembed` registers it (``TextEmbedding.add_custom_model``) and loads it from that folder
(``specific_model_path``, ``local_files_only``), with fastembed's defaults otherwise: its tokenizer rules (it
truncates at the tokenizer config's limit, not at sentence-transformers' ``max_seq_length``), batch size 256,
ONNX Runtime's thread count (``SUITE_FASTEMBED_BATCH``, set by the suite's ``--fastembed-batch``, changes the batch
size: 256 texts of 512 tokens ran out of 24 GiB on NFCorpus; ``SUITE_FASTEMBED_MAX_TOKENS``, the suite's
``--fastembed-max-tokens``, its truncation, written as the model folder's ``model_max_length``). `run_fastembed` encodes the corpus and the judged queries and scores the vectors
with our exact search and metrics, after checking them against sentence-transformers' own vectors
(`agreement`): a pooling or normalization that differs from the model's would make the comparison unfair.

Nothing leaves the machine: the hub is never asked (``specific_model_path`` returns before any download,
``HF_HUB_OFFLINE=1`` besides), and ONNX Runtime's telemetry is declined (``ORT_DISABLE_TELEMETRY=1``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

NAME = "beir-harness/suite-{pooling}-{norm}-{dim}"  # our own names (fastembed refuses one it ships), one per setting
MIN_COSINE = 0.999  # each check text's vector against sentence-transformers' own
MAX_NORM_GAP = 1e-3  # and its length: cosine alone cannot tell a missing normalization
CHECK_TEXTS = 8
DEPTH = 100  # the pipeline's default depth (harness.pipeline.config.DEFAULT_DEPTH)
K_VALUES = (1, 3, 5, 10, 100)
# The files fastembed's tokenizer loader reads (tokenizer_config.json holds its truncation limit).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")


def fastembed_missing() -> str | None:
    """None when fastembed can be imported, else the line the suite prints in place of its figures."""
    if importlib.util.find_spec("fastembed") is None:
        return "fastembed: skipped (not installed: pip install 'beir-harness[peers]', docs/dependencies.md)"
    return None


def model_settings(model: Any) -> dict[str, Any]:
    """What fastembed must be told of a sentence-transformers model: pooling, normalization, dimension."""
    modules = {type(module).__name__: module for module in model}
    pooling = modules.get("Pooling")
    mode = getattr(pooling, "pooling_mode", None)  # sentence-transformers ≥ 6: one string
    if not isinstance(mode, str):
        mode = "mean" if getattr(pooling, "pooling_mode_mean_tokens", False) else "cls"
    if mode not in ("mean", "cls"):
        raise SystemExit(f"fastembed: the model pools by {mode!r}; only mean or CLS pooling can be compared")
    return {"pooling": mode, "normalize": "Normalize" in modules, "dim": model.get_embedding_dimension()}


def write_model_folder(model: Any, source: Path, out: Path) -> dict[str, Any]:
    """The folder fastembed loads: the ONNX export, the tokenizer files as the model ships them, settings.json."""
    from harness.runtimes.onnx_backend import export

    export(model, out / "onnx", quantize=False)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    if not (out / "tokenizer_config.json").is_file():  # a model without its own files: the tokenizer's save
        model.tokenizer.save_pretrained(str(out))
    if os.environ.get("SUITE_FASTEMBED_MAX_TOKENS"):  # the suite's --fastembed-max-tokens: like for like
        config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
        config["model_max_length"] = int(os.environ["SUITE_FASTEMBED_MAX_TOKENS"])  # fastembed's truncation limit
        (out / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    settings = model_settings(model)
    (out / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return settings


def read_dataset(folder: str) -> tuple[list[str], list[str], list[tuple[str, str]], Any, str]:
    """(document ids, document texts, judged queries as (id, text), qrels, dataset name), as the pipeline reads them."""
    from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder
    from harness.io.trec import read_qrels
    from harness.records import doc_text

    beir = locate_beir_folder(folder, "test")
    docs = list(iter_corpus(beir.corpus))
    qrels = read_qrels(beir.qrels)
    queries = [(q.query_id, q.text) for q in iter_queries(beir.queries) if q.query_id in qrels]
    return [d.doc_id for d in docs], [doc_text(d) for d in docs], queries, qrels, Path(folder).name


def prepare_fastembed(source: str, folder: str, out: str) -> dict[str, Any]:
    """Write the model folder for fastembed, and sentence-transformers' own vectors of a few short texts."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    start = time.perf_counter()
    model = SentenceTransformer(source, device="cpu")
    Path(out).mkdir(parents=True, exist_ok=True)
    write_model_folder(model, Path(source), Path(out))
    _, texts, queries, _, _ = read_dataset(folder)
    limit = model.max_seq_length
    lengths = [len(ids) for ids in model.tokenizer(texts, add_special_tokens=True)["input_ids"]]
    short = [text for text, n in zip(texts, lengths) if n <= limit]  # both read them whole
    checks = short[: CHECK_TEXTS - 2] + [text for _, text in queries[:2]]
    reference = model.encode(checks, convert_to_numpy=True)  # the model's own modules: its pooling, its Normalize
    np.save(Path(out) / "reference.npy", reference)
    (Path(out) / "checks.json").write_text(json.dumps(checks), encoding="utf-8")
    over = sum(n > limit for n in lengths)
    return {"seconds": time.perf_counter() - start, "st_max_tokens": limit, "over_st_limit": over, "docs": len(texts)}


def load_fastembed(model_dir: Path, cache_dir: Path) -> Any:
    """fastembed's TextEmbedding on the folder `write_model_folder` wrote, offline, with its defaults otherwise."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # fastembed reads it: local files only
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # read when ONNX Runtime starts
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    settings = json.loads((model_dir / "settings.json").read_text(encoding="utf-8"))
    name = NAME.format(norm="normalized" if settings["normalize"] else "raw", **settings)
    if not any(entry["model"] == name for entry in TextEmbedding.list_supported_models()):  # once per process
        TextEmbedding.add_custom_model(
            name,
            pooling=PoolingType[settings["pooling"].upper()],
            normalization=settings["normalize"],
            sources=ModelSource(hf="sentence-transformers/all-MiniLM-L6-v2"),  # never fetched: the folder is given
            dim=settings["dim"],
        )
    return TextEmbedding(name, cache_dir=str(cache_dir), specific_model_path=str(model_dir), local_files_only=True)


def agreement(vectors: Any, reference: Any) -> dict[str, float]:
    """The smallest cosine between matching rows and the largest difference of their lengths."""
    import numpy as np

    vectors, reference = np.asarray(vectors, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    norms, reference_norms = np.linalg.norm(vectors, axis=1), np.linalg.norm(reference, axis=1)
    cosines = (vectors * reference).sum(axis=1) / (norms * reference_norms)
    return {"min_cosine": float(cosines.min()), "max_norm_gap": float(np.abs(norms - reference_norms).max())}


def check_agreement(embedder: Any, model_dir: Path) -> dict[str, float]:
    """fastembed's vectors of the check texts against sentence-transformers' own; exit when they disagree."""
    import numpy as np

    checks = json.loads((model_dir / "checks.json").read_text(encoding="utf-8"))
    found = agreement(np.asarray(list(embedder.embed(checks))), np.load(model_dir / "reference.npy"))
    if found["min_cosine"] < MIN_COSINE or found["max_norm_gap"] > MAX_NORM_GAP:
        raise SystemExit(
            f"{model_dir}: fastembed's vectors differ from sentence-transformers' own on {len(checks)} texts "
            f"(min cosine {found['min_cosine']:.5f}, need ≥ {MIN_COSINE}; largest norm gap {found['max_norm_gap']:.2g}, "
            f"need ≤ {MAX_NORM_GAP}): its pooling or normalization is not the model's; fix settings.json"
        )
    return {**found, "check_texts": len(checks)}


def score(doc_ids: list[str], vectors: Any, queries: list[tuple[str, str]], query_vectors: Any, qrels: Any, name: str):
    """nDCG@10 of the vectors under our exact search, self-hit policy and metrics (the pipeline's defaults)."""
    from harness.evaluation.metrics import evaluate, standard_metrics
    from harness.pipeline.evaluate import EvaluateConfig, apply_self_hit_policy, self_hit_policy
    from harness.retrieval.index import VectorIndex

    index = VectorIndex(vectors.shape[1])
    index.add(doc_ids, vectors)
    ignore, _ = self_hit_policy(EvaluateConfig(dataset_path=Path(name)), name)
    run = index.search([q for q, _ in queries], query_vectors, DEPTH + int(ignore))
    run = apply_self_hit_policy(run, ignore).truncated(DEPTH)
    return evaluate(qrels, run, standard_metrics(K_VALUES)).means["nDCG@10"]


def run_fastembed(folder: str, model_dir: str, cache_dir: str) -> dict[str, Any]:
    """fastembed on the dataset: load, check (before any corpus text is encoded), encode the corpus (timed: docs/s)
    and the queries, search, score. The check is the benchmark's work, not a user's: its time is left out."""
    from importlib.metadata import version

    import numpy as np

    start = time.perf_counter()
    doc_ids, texts, queries, qrels, name = read_dataset(folder)
    embedder = load_fastembed(Path(model_dir), Path(cache_dir))
    checking = time.perf_counter()
    checked = check_agreement(embedder, Path(model_dir))
    loaded = time.perf_counter()
    batch = {"batch_size": int(os.environ["SUITE_FASTEMBED_BATCH"])} if os.environ.get("SUITE_FASTEMBED_BATCH") else {}
    vectors = np.asarray(list(embedder.embed(texts, **batch)), dtype=np.float32)
    encode = time.perf_counter() - loaded
    query_vectors = np.asarray(list(embedder.query_embed([text for _, text in queries], **batch)), dtype=np.float32)
    ndcg10 = score(doc_ids, vectors, queries, query_vectors, qrels, name)
    return {
        "seconds": time.perf_counter() - start - (loaded - checking),
        "load_seconds": checking - start,
        "encode_seconds": encode,
        "docs": len(texts),
        "docs_per_s": len(texts) / encode,
        "ndcg10": ndcg10,
        "version": version("fastembed"),
        "max_tokens": embedder.model.tokenizer.truncation["max_length"],
        "batch_size": batch.get("batch_size"),  # None: fastembed's default
        **checked,
    }
