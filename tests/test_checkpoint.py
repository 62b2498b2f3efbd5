"""Time-based checkpoints inside a chunk: written by time, reused exactly, replaced by the whole chunk."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from harness.io.cache import embedding_entry
from harness.records import Doc
from harness.retrieval.encode import encode_corpus, load_encoder


def _docs(n: int) -> list[Doc]:
    return [Doc(f"d{i}", "", " ".join(f"w{(i * k) % 13}" for k in range(1 + i % 9))) for i in range(n)]


class Recorder:
    """Counts the batches the encoder sees (hashing vectors underneath)."""

    def __init__(self):
        self.inner = load_encoder("hash:32")
        self.batches: list[list[str]] = []

    def encode_docs(self, texts):
        self.batches.append(list(texts))
        return self.inner.encode_docs(texts)


def test_checkpoints_do_not_change_the_vectors_and_are_reused_exactly(tmp_path):
    docs = _docs(50)
    ((ids, plain, _),) = encode_corpus(Recorder(), iter(docs), chunk_size=100, batch_size=4, progress=False)
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(100)
    pieces = []
    entry_write = entry.write_piece
    entry.write_piece = lambda *args: (pieces.append(args[2]), entry_write(*args))[1]
    first = Recorder()
    ((_, checkpointed, _),) = encode_corpus(
        first, iter(docs), chunk_size=100, batch_size=4, progress=False, store=entry, checkpoint_seconds=0
    )
    np.testing.assert_array_equal(checkpointed, plain)
    assert len(pieces) == 12  # 13 batches: a piece after each but the last (the chunk itself is stored then)
    # A rerun of the unfinished chunk encodes only the batch that was never checkpointed.
    again = Recorder()
    ((rerun_ids, resumed, seconds),) = encode_corpus(
        again, iter(docs), chunk_size=100, batch_size=4, progress=False, store=entry, checkpoint_seconds=0
    )
    assert rerun_ids == ids and len(again.batches) == 1 and again.batches[0] == first.batches[-1]
    np.testing.assert_array_equal(resumed, plain)
    entry.write_chunk(0, ids, resumed)
    assert not list(entry.root.glob("*.piece-*"))  # the whole chunk replaced its pieces
    assert entry.stored(0, ids)[0] == ids


def test_no_checkpoint_before_the_time_has_passed(tmp_path):
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(100)
    list(
        encode_corpus(
            Recorder(),
            iter(_docs(50)),
            chunk_size=100,
            batch_size=4,
            progress=False,
            store=entry,
            checkpoint_seconds=3600,
        )
    )
    assert not list(entry.root.glob("*.piece-*"))


def test_a_damaged_or_foreign_piece_is_ignored(tmp_path):
    docs = _docs(20)
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(100)
    entry.write_piece(0, "bad", ["d1", "d2"], np.ones((3, 32), np.float32))  # rows ≠ ids
    entry.write_piece(0, "foreign", ["zz"], np.ones((1, 32), np.float32))  # not a document of this chunk
    (entry.root / "chunk-00000.piece-torn.ids.json").write_text('["d3"]')  # its vectors never landed
    assert entry.stored(0, [d.doc_id for d in docs]) is None
    ((_, vectors, _),) = encode_corpus(
        Recorder(), iter(docs), chunk_size=100, batch_size=4, progress=False, store=entry
    )
    ((_, plain, _),) = encode_corpus(Recorder(), iter(docs), chunk_size=100, batch_size=4, progress=False)
    np.testing.assert_array_equal(vectors, plain)


def test_a_ray_shard_checkpoints_and_resumes_without_ray(tmp_path):
    """The Ray worker's code path, called directly: pieces of a shard are written and reused."""
    from harness.engines.shards import ShardEncoder

    docs = _docs(30)
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(10)
    worker = ShardEncoder(partial(load_encoder, "hash:32"), entry, load_encoder("hash:32").fingerprint())
    worker.ready()
    marked = np.full((2, 32), 7.0, np.float32)
    shard = docs[10:20]
    # Pretend a worker died after checkpointing the two longest texts of shard 1 (its first batch).
    longest = sorted(shard, key=lambda d: -len(d.text))[:2]
    entry.write_piece(1, "b2-test", [d.doc_id for d in longest], marked)
    rows, _ = worker.encode(1, shard, 2, 0)
    ids, vectors = entry.read_chunk(1)
    assert rows == 10 and ids == [d.doc_id for d in shard]
    for doc in longest:
        np.testing.assert_array_equal(vectors[ids.index(doc.doc_id)], marked[0])  # reused, not re-encoded
    assert not list(entry.root.glob("chunk-00001.piece-*"))


def test_checkpoint_seconds_must_not_be_negative(tiny_beir, tmp_path):
    from harness.errors import HarnessError
    from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

    with pytest.raises(HarnessError, match="checkpoint_seconds must be 0 or more"):
        evaluate_dataset(EvaluateConfig(tiny_beir, model="hash:32", checkpoint_seconds=-1, output_dir=None))


def test_the_progress_bar_says_how_many_documents_are_stored(tmp_path, capsys):
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(100)
    list(
        encode_corpus(
            Recorder(), iter(_docs(50)), chunk_size=20, batch_size=4, progress=True, store=entry, checkpoint_seconds=0
        )
    )
    assert "stored=" in capsys.readouterr().err


class Failing(Recorder):
    """Raises `error` on the `at`-th batch."""

    def __init__(self, error: BaseException, at: int):
        super().__init__()
        self.error, self.at = error, at

    def encode_docs(self, texts):
        if len(self.batches) + 1 == self.at:
            raise self.error
        return super().encode_docs(texts)


def test_out_of_memory_keeps_the_encoded_batches_and_says_what_fits(tmp_path):
    import torch

    from harness.errors import HarnessError

    docs = _docs(40)
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(100)
    with pytest.raises(
        HarnessError,
        match=r"ran out of memory on a batch of 4 texts \(chunk 0\); 8 documents are "
        r"stored .*--batch-size 2\)",
    ):
        list(
            encode_corpus(
                Failing(torch.OutOfMemoryError("CUDA out of memory"), 3),
                iter(docs),
                chunk_size=100,
                batch_size=4,
                progress=False,
                store=entry,
                checkpoint_seconds=3600,
            )
        )
    stored = entry.stored(0, [d.doc_id for d in docs])
    assert stored is not None and len(stored[0]) == 8  # the two batches before the failure
    again = Recorder()
    ((_, vectors, _),) = encode_corpus(again, iter(docs), chunk_size=100, batch_size=4, progress=False, store=entry)
    ((_, plain, _),) = encode_corpus(Recorder(), iter(docs), chunk_size=100, batch_size=4, progress=False)
    assert len(again.batches) == 8 and np.array_equal(vectors, plain)


def test_ctrl_c_mid_chunk_stores_what_was_encoded(tmp_path):
    docs = _docs(40)
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(100)
    with pytest.raises(KeyboardInterrupt):
        list(
            encode_corpus(
                Failing(KeyboardInterrupt(), 6),
                iter(docs),
                chunk_size=100,
                batch_size=4,
                progress=False,
                store=entry,
                checkpoint_seconds=3600,
            )
        )
    assert len(entry.stored(0, [d.doc_id for d in docs])[0]) == 20


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A 2-layer random BERT whose word-level vocabulary holds the words below, cut at 256 tokens as the default
    model is: batching, token budgets and the pipelined path are the same code whatever the weights."""
    from tiny_models import bi_encoder

    words = ["t", "word", *(f"term{i}" for i in range(50))]
    folder = tmp_path_factory.mktemp("models") / "bi"
    bi_encoder(folder, words, hidden=64, positions=512, init=None, max_seq_length=256, normalize=True)
    return load_encoder(str(folder))


def test_token_budget_batches_cover_every_text_once_within_the_budget(tiny_encoder):
    from harness.retrieval.encode import plan_batches

    texts = [" ".join(["word"] * n) for n in (3, 200, 40, 7, 7, 90, 1, 300, 12)]
    batches = plan_batches(tiny_encoder, texts, 32, token_budget=256)
    lengths = tiny_encoder.token_lengths(texts)
    assert max(lengths) == 256 and min(lengths) == 3  # cut at 256 tokens; [CLS] and [SEP] counted
    assert sorted(i for batch in batches for i in batch) == list(range(len(texts)))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 256
    assert len(batches[0]) < len(batches[-1])  # long texts in small batches, short ones in large


def test_token_budget_and_the_pipelined_path_give_the_plain_vectors(tiny_encoder):
    from dataclasses import replace

    from harness.records import doc_text

    docs = [Doc(f"d{i}", "T", " ".join(f"term{(i * k) % 50}" for k in range(1 + (i * 7) % 60))) for i in range(40)]
    ((ids, plain, _),) = encode_corpus(tiny_encoder, iter(docs), batch_size=8, progress=False)
    ((_, budget, _),) = encode_corpus(tiny_encoder, iter(docs), batch_size=8, progress=False, token_budget=300)
    pipelined = replace(tiny_encoder, _pipelined=True)
    assert pipelined.pipelined and not tiny_encoder.pipelined  # on a CPU, only when asked
    ((piped_ids, piped, _),) = encode_corpus(pipelined, iter(docs), batch_size=8, progress=False, token_budget=300)
    assert piped_ids == ids == [d.doc_id for d in docs]  # input order
    np.testing.assert_allclose(budget, plain, atol=1e-5)
    np.testing.assert_allclose(piped, plain, atol=1e-5)
    batches = [[doc_text(d) for d in docs[:5]], [doc_text(d) for d in docs[5:9]]]
    for got, texts in zip(pipelined.encode_doc_batches(batches), batches):
        np.testing.assert_allclose(got, tiny_encoder.encode_docs(texts), atol=1e-6)
