"""Each process encodes on exactly its device: torch's CUDA calls faked where the bug lived
(docs/evaluate.md, "Keeping a GPU busy").

No GPU runs here. `FakeCuda` replaces the calls of `torch.cuda` the encoder makes (device scopes,
streams, events, set_device) and the tensor moves that involve a device (pinning, copies in and out),
records which device each ran under, and fails at once on a call that lands on a device the process
was not given (a stream of ``cuda:0`` for a model on ``cuda:1``, pinned memory registered under
``cuda:0``), on a non-blocking copy in from unpinned memory, and on a read of a host buffer whose copy
was not followed by an event that has completed. The vectors' expected values come from a loop in
this file, not from the encoder.
"""

from __future__ import annotations

import contextlib
import json
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from harness.records import Doc  # noqa: E402
from harness.retrieval.encode import SentenceTransformerEncoder, encode_corpus  # noqa: E402


class CudaMisuse(AssertionError):
    """A CUDA call the fake refuses (kept in `FakeCuda.failures` too, in case the code swallows it)."""


def _index(device) -> int | None:
    if device is None:
        return None
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index or 0 if device.type == "cuda" else None


class FakeStream:
    def __init__(self, cuda: FakeCuda, device: int):
        self.cuda, self.device = cuda, device

    def synchronize(self) -> None:
        self.cuda.touch("Stream.synchronize", self.device)
        self.cuda.whole_syncs += 1
        for state in self.cuda.unlanded:
            if state["device"] == self.device:
                state["landed"] = True


class FakeEvent:
    def __init__(self, cuda: FakeCuda):
        self.cuda, self.captured = cuda, []

    def record(self, stream: FakeStream | None = None) -> None:
        stream = stream or self.cuda.current_stream()
        self.cuda.touch("Event.record", stream.device)
        # An event covers the work queued before it on its stream: copies queued on another device's
        # stream are not covered, and stay unlanded for whoever reads them.
        self.captured = [state for state in self.cuda.unlanded if state["device"] == stream.device]

    def synchronize(self) -> None:
        for state in self.captured:
            self.cuda.touch("Event.synchronize", state["device"])
            state["landed"] = True

    def query(self) -> bool:
        return all(state["landed"] for state in self.captured)


class FakeCuda:
    """The CUDA side of torch as one process given only cuda:`given` sees it (a thread starts on cuda:0)."""

    def __init__(self, given: int, count: int = 2, bf16: bool = True):
        self.given, self.count, self.bf16 = given, count, bf16
        self.local = threading.local()
        self.calls: list[tuple[str, int]] = []
        self.failures: list[str] = []
        self.unlanded: list[dict] = []
        self.whole_syncs = 0

    def current(self) -> int:
        return getattr(self.local, "device", 0)

    def fail(self, message: str) -> None:
        self.failures.append(message)
        raise CudaMisuse(message)

    def touch(self, what: str, device: int) -> None:
        self.calls.append((what, device))
        if device != self.given:
            self.fail(f"{what} ran on cuda:{device}, but this process was given cuda:{self.given} only")

    @contextlib.contextmanager
    def device(self, device):
        before = self.current()
        self.local.device = _index(device)
        try:
            yield
        finally:
            self.local.device = before

    def set_device(self, device) -> None:
        self.local.device = _index(device)

    def current_stream(self, device=None) -> FakeStream:
        index = self.current() if _index(device) is None else _index(device)
        self.touch("current_stream", index)
        return FakeStream(self, index)

    def synchronize(self, device=None) -> None:
        index = self.current() if _index(device) is None else _index(device)
        self.touch("synchronize", index)
        self.whole_syncs += 1
        for state in self.unlanded:
            if state["device"] == index:
                state["landed"] = True

    def install(self, monkeypatch) -> FakeCuda:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "device", self.device)
        monkeypatch.setattr(cuda, "set_device", self.set_device)
        monkeypatch.setattr(cuda, "current_stream", self.current_stream)
        monkeypatch.setattr(cuda, "synchronize", self.synchronize)
        monkeypatch.setattr(cuda, "Event", lambda *a, **k: FakeEvent(self))
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: self.count)
        monkeypatch.setattr(cuda, "current_device", self.current)
        monkeypatch.setattr(cuda, "is_bf16_supported", lambda including_emulation=True: self.bf16)
        real_to, real_numpy = torch.Tensor.to, torch.Tensor.numpy
        fake = self

        def pin_memory(tensor):
            fake.touch("pin_memory", fake.current())  # pinned memory is registered with the current context
            out = tensor.clone()
            out._fake_pinned = True
            return out

        def to(tensor, *args, **kwargs):
            target = args[0] if args else kwargs.get("device")
            kind = torch.device(target).type if isinstance(target, (str, torch.device)) else None
            non_blocking = kwargs.get("non_blocking", False)
            if kind == "cuda":
                index = _index(target)
                fake.touch("copy to device", index)
                if fake.current() != index:
                    fake.fail(f"a copy to cuda:{index} was queued under cuda:{fake.current()}'s stream")
                if non_blocking and not getattr(tensor, "_fake_pinned", False):
                    fake.fail("a non-blocking copy in from unpinned memory (it blocks)")
                out = tensor.clone()
                out._fake_device = index
                return out
            if kind == "cpu" and non_blocking:
                fake.touch("copy to host", fake.current())
                out = real_to(tensor, "cpu", copy=True)
                out._fake_state = {"device": fake.current(), "landed": False}
                fake.unlanded.append(out._fake_state)
                return out
            return real_to(tensor, *args, **kwargs)

        def numpy(tensor, *args, **kwargs):
            state = getattr(tensor, "_fake_state", None)
            if state is not None and not state["landed"]:
                fake.fail("a host buffer was read before the event after its copy completed")
            return real_numpy(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
        monkeypatch.setattr(torch.Tensor, "to", to)
        monkeypatch.setattr(torch.Tensor, "numpy", numpy)
        return self


def features_of(text: str) -> list[float]:
    """The fake model's vector of one text, computed independently of the encoder: word count, characters,
    vowels, and a constant."""
    return [float(len(text.split())), float(len(text)), float(sum(c in "aeiou" for c in text)), 1.0]


class FakeModel:
    """A sentence-transformers model on `device`, as far as the encoder uses one; its forward pass checks
    that its inputs were copied to its device and that it runs under that device."""

    def __init__(self, cuda: FakeCuda, device: str, vectors=features_of, fail: tuple[int, Exception] | None = None):
        self.cuda, self.device, self.vectors, self.fail = cuda, torch.device(device), vectors, fail
        self.prompts, self.max_seq_length, self.forwards = {}, 128, 0

    def eval(self):
        return self

    def preprocess(self, texts, prompt=None):
        # The "token ids" carry the text (bytes, zero-padded), so the forward pass can compute `features_of`.
        width = max(len(t.encode()) for t in texts)
        ids = torch.tensor([list(t.encode()) + [0] * (width - len(t.encode())) for t in texts])
        return {"input_ids": ids, "attention_mask": (ids > 0).long()}

    def __call__(self, features):
        self.cuda.touch("forward", self.cuda.current())
        self.forwards += 1
        if self.fail is not None and self.forwards == self.fail[0]:
            raise self.fail[1]
        for name, tensor in features.items():
            if getattr(tensor, "_fake_device", None) != _index(self.device):
                self.cuda.fail(f"forward on {self.device} got {name} that was not copied there")
        texts = [bytes(row[row > 0].tolist()).decode() for row in features["input_ids"]]
        return {"sentence_embedding": torch.tensor([self.vectors(t) for t in texts], dtype=torch.float32)}

    def encode(self, texts, **kwargs):
        self.cuda.touch("encode", self.cuda.current())
        return np.array([self.vectors(t) for t in texts], dtype=np.float32)


WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def corpus(n: int = 23) -> list[Doc]:
    return [Doc(f"d{i}", "", " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(1 + i % 9))) for i in range(n)]


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_model_on_cuda_1_touches_cuda_1_only_and_reads_only_landed_vectors(monkeypatch, pipelined):
    cuda = FakeCuda(given=1).install(monkeypatch)
    encoder = SentenceTransformerEncoder("fake", FakeModel(cuda, "cuda:1"), normalize=False, _pipelined=pipelined)
    docs = corpus()
    ((doc_ids, vectors, _),) = encode_corpus(encoder, iter(docs), chunk_size=100, batch_size=4, progress=False)
    assert cuda.failures == []
    assert doc_ids == [doc.doc_id for doc in docs]
    np.testing.assert_array_equal(vectors, np.array([features_of(doc.text) for doc in docs], dtype=np.float32))
    assert cuda.whole_syncs == 0  # events per copy, not whole-stream synchronisation
    ran = {what for what, _ in cuda.calls}
    assert (
        {"pin_memory", "copy to device", "forward", "copy to host", "Event.record", "Event.synchronize"} <= ran
        if pipelined
        else ran == {"encode"}
    )


def test_the_fake_catches_the_old_whole_stream_sync_on_cuda_0(monkeypatch):
    """The fake itself: the bug as it was (`torch.cuda.current_stream().synchronize()` outside any device
    scope) is caught."""
    cuda = FakeCuda(given=1).install(monkeypatch)
    with pytest.raises(CudaMisuse, match="current_stream ran on cuda:0"):
        torch.cuda.current_stream().synchronize()
    with torch.cuda.device(1):
        host = torch.ones(2).to("cpu", non_blocking=True)
    with pytest.raises(CudaMisuse, match="read before the event"):
        host.numpy()
    assert len(cuda.failures) == 2


def test_a_multi_device_worker_sets_its_device_before_loading(monkeypatch):
    from harness.engines import multi_device

    cuda = FakeCuda(given=1).install(monkeypatch)
    seen = []

    class Queue:
        def get(self):
            return "cuda:1"

    def load(device):
        seen.append((device, cuda.current()))
        return SentenceTransformerEncoder("fake", FakeModel(cuda, device))

    monkeypatch.setattr(multi_device, "ShardEncoder", lambda build, entry, fingerprint: SimpleWorker(build))
    multi_device.start_worker(load, None, {}, Queue())
    assert seen == [("cuda:1", 1)]  # the process's current device was its own when the model loaded


class SimpleWorker:
    def __init__(self, build):
        self.encoder, self.host = build(), "here"


# Finite vectors only (docs/evaluate.md, "Keeping a GPU busy": NaN or infinity in a batch).


class NaNInBatch:
    """Hashing vectors, with a NaN in one row of the `at`-th batch (1-based) it is given."""

    name, max_seq_length, normalize, dimension, device, precision = "nan", None, True, 16, "cuda:0", "fp16"

    def __init__(self, at: int):
        from harness.retrieval.encode import load_encoder

        self.inner, self.at, self.batches = load_encoder("hash:16"), at, 0

    def encode_docs(self, texts):
        self.batches += 1
        vectors = self.inner.encode_docs(texts)
        if self.batches == self.at:
            vectors[1, 3] = np.nan
        return vectors


def test_a_batch_with_a_nan_is_an_error_naming_it_and_nothing_of_it_is_cached(tmp_path):
    from harness.io.cache import embedding_entry
    from harness.retrieval.encode import NonFiniteVectors

    docs = corpus(23)
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(100)
    # Batches of 4, longest text first (independently: sort by length, then cut).
    order = sorted(range(len(docs)), key=lambda i: -len(docs[i].text))
    third = [docs[i].doc_id for i in order[8:12]]
    with pytest.raises(
        NonFiniteVectors,
        match=rf"batch 3 of 6, chunk 0 \(first document '{third[0]}'\).*"
        r"use --precision bf16",
    ):
        list(
            encode_corpus(
                NaNInBatch(3),
                iter(docs),
                chunk_size=100,
                batch_size=4,
                progress=False,
                store=entry,
                checkpoint_seconds=0,
            )
        )
    stored_ids, vectors = entry.stored(0, [doc.doc_id for doc in docs])
    assert sorted(stored_ids) == sorted(docs[i].doc_id for i in order[:8])  # the two batches before it
    assert not set(third) & set(stored_ids) and np.isfinite(vectors).all()


# Out of device memory, in every form torch raises it, in every engine (docs/evaluate.md, "Keeping a GPU busy").

OUT_OF_MEMORY = {
    "OutOfMemoryError": lambda: torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    "cuBLAS": lambda: RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    "cuDNN": lambda: RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    "allocator": lambda: RuntimeError("CUDA error: out of memory"),
}


class OutOfMemoryAt:
    """Hashing vectors; raises out-of-memory error `kind` on the `at`-th batch (1-based)."""

    name, max_seq_length, normalize, dimension, device = "oom", None, True, 16, "cpu"

    def __init__(self, kind: str, at: int):
        from harness.retrieval.encode import load_encoder

        self.inner, self.kind, self.at, self.batches = load_encoder("hash:16"), kind, at, 0

    def fingerprint(self):
        return {"name": "oom"}

    def encode_docs(self, texts):
        self.batches += 1
        if self.batches == self.at:
            raise OUT_OF_MEMORY[self.kind]()
        return self.inner.encode_docs(texts)


def out_of_memory_loader(kind: str, at: int, device: str) -> OutOfMemoryAt:
    """The several-devices engine's loader (module level: a spawned worker imports it)."""
    return OutOfMemoryAt(kind, at)


def _entry(tmp_path):
    from harness.io.cache import embedding_entry

    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(100)
    return entry


@pytest.mark.parametrize("kind", sorted(OUT_OF_MEMORY))
def test_out_of_memory_in_any_form_keeps_finished_batches_and_says_what_fits(tmp_path, kind):
    from harness.errors import HarnessError

    docs, entry = corpus(23), _entry(tmp_path)
    with pytest.raises(
        HarnessError,
        match=r"^the device ran out of memory on a batch of 4 texts \(chunk 0\); 8 "
        r"documents are stored .*\(--batch-size 2\)$",
    ):
        list(
            encode_corpus(
                OutOfMemoryAt(kind, 3),
                iter(docs),
                chunk_size=100,
                batch_size=4,
                progress=False,
                store=entry,
                checkpoint_seconds=3600,
            )
        )
    assert len(entry.stored(0, [doc.doc_id for doc in docs])[0]) == 8


def test_a_runtime_error_that_is_not_out_of_memory_is_not_called_one(tmp_path):
    class Broken(OutOfMemoryAt):
        def encode_docs(self, texts):
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        list(encode_corpus(Broken("cuBLAS", 1), iter(corpus()), batch_size=4, progress=False))


@pytest.mark.parametrize("kind", ["OutOfMemoryError", "cuBLAS"])
def test_out_of_memory_in_the_pipelined_path_names_the_batch_that_failed(monkeypatch, tmp_path, kind):
    """The pipelined encoder runs one batch ahead: the failure is the batch being launched (the last, of 3
    texts), not the one the caller waits for (4 texts); the batch before it is yielded and stored first."""
    from harness.errors import HarnessError

    cuda = FakeCuda(given=1).install(monkeypatch)
    model = FakeModel(cuda, "cuda:1", fail=(6, OUT_OF_MEMORY[kind]()))
    encoder = SentenceTransformerEncoder("fake", model, normalize=False, _pipelined=True)
    docs, entry = corpus(23), _entry(tmp_path)
    with pytest.raises(
        HarnessError,
        match=r"ran out of memory on a batch of 3 texts \(chunk 0\); 20 documents are "
        r"stored .*\(--batch-size 1\)",
    ):
        list(
            encode_corpus(
                encoder, iter(docs), chunk_size=100, batch_size=4, progress=False, store=entry, checkpoint_seconds=3600
            )
        )
    assert cuda.failures == [] and len(entry.stored(0, [doc.doc_id for doc in docs])[0]) == 20


def test_out_of_memory_on_a_device_worker_is_the_one_line_error_not_a_runtime_error(tmp_path):
    from functools import partial

    from harness.engines.multi_device import encode_corpus_devices
    from harness.engines.shards import EncodeJob
    from harness.errors import HarnessError

    docs, entry = corpus(23), _entry(tmp_path)
    job = EncodeJob(
        partial(out_of_memory_loader, "cuBLAS", 2),
        {"name": "oom"},
        entry,
        chunk_size=100,
        batch_size=4,
        checkpoint_seconds=3600,
    )
    with pytest.raises(
        HarnessError,
        match=r"^chunk 0 \(documents 1-23\) failed: the device ran out of memory on a "
        r"batch of 4 texts \(chunk 0\); 4 documents are stored .*--batch-size 2",
    ):
        list(encode_corpus_devices(job, iter(docs), ["cpu"], progress=False))
    assert len(entry.stored(0, [doc.doc_id for doc in docs])[0]) == 4


class NaNQueries:
    """Hashing vectors for the documents; a NaN in the second query's vector."""

    name, max_seq_length, normalize, dimension, device, precision = "nan-queries", None, True, 16, "cpu", "fp16"

    def __init__(self):
        from harness.retrieval.encode import load_encoder

        self.inner = load_encoder("hash:16")

    def fingerprint(self):
        return {"name": self.name, "scheme": "test"}

    def settings(self):
        return {"normalize": True}

    def encode_docs(self, texts):
        return self.inner.encode_docs(texts)

    def encode_queries(self, texts):
        vectors = self.inner.encode_queries(texts)
        vectors[1, 0] = np.inf
        return vectors


def test_a_query_vector_with_a_nan_is_an_error_and_is_not_cached(tmp_path, tiny_beir):
    from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
    from harness.retrieval.encode import NonFiniteVectors

    cache = tmp_path / "cache"
    config = EvaluateConfig(
        dataset_path=tiny_beir, model="nan-queries", output_dir=None, progress=False, cache_dir=cache, k_values=(1, 10)
    )
    with pytest.raises(NonFiniteVectors, match=r"for 1 of 3 queries \(first 'q2'\); none is stored; fp16 overflows"):
        evaluate_dataset(config, encoder=NaNQueries())
    kinds = [json.loads(key.read_text())["inputs"]["kind"] for key in cache.glob("embeddings/*/key.json")]
    assert kinds == ["corpus"]  # the documents' vectors are kept; no entry for the queries


def test_out_of_memory_while_pinning_in_the_tokenizer_thread_names_that_batch(monkeypatch, tmp_path):
    """Pinning runs in the tokenizer thread, ahead of the forward passes: an OOM there (the last batch, of 3 texts)
    is the same one-line error naming that batch, the batches before it stored first."""
    from harness.errors import HarnessError

    cuda = FakeCuda(given=1).install(monkeypatch)
    fake_pin = torch.Tensor.pin_memory

    def pin_memory(tensor):
        if tensor.dim() and tensor.shape[0] == 3:
            raise OUT_OF_MEMORY["OutOfMemoryError"]()
        return fake_pin(tensor)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    encoder = SentenceTransformerEncoder("fake", FakeModel(cuda, "cuda:1"), normalize=False, _pipelined=True)
    docs, entry = corpus(23), _entry(tmp_path)
    with pytest.raises(
        HarnessError,
        match=r"ran out of memory on a batch of 3 texts \(chunk 0\); 20 documents are "
        r"stored",
    ):
        list(
            encode_corpus(
                encoder, iter(docs), chunk_size=100, batch_size=4, progress=False, store=entry, checkpoint_seconds=3600
            )
        )
    assert len(entry.stored(0, [doc.doc_id for doc in docs])[0]) == 20


def test_the_wait_for_a_batch_sleeps_on_a_blocking_event(monkeypatch):
    """The event after each device-to-host copy is made with blocking=True: its wait yields the core (a spinning
    wait takes the core the tokenizer thread needs)."""
    cuda = FakeCuda(given=1).install(monkeypatch)
    made = []
    monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: made.append(k) or FakeEvent(cuda))
    encoder = SentenceTransformerEncoder("fake", FakeModel(cuda, "cuda:1"), normalize=False, _pipelined=True)
    list(encode_corpus(encoder, iter(corpus(9)), batch_size=4, progress=False))
    assert made and all(kwargs.get("blocking") is True for kwargs in made), made
