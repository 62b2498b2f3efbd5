"""The text store's segments: compacted, marked used, pruned least recently used first, and found when another
process merges them away mid-lookup."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.io.cache.texts import TextStore, text_digests
from harness.io.cache.upkeep import prune_cache


def _stamp(path: Path, when: float) -> None:
    os.utime(path, (when, when))


def _segments(root: Path) -> dict[str, Path]:
    return {m.stem: m for m in (root / "texts").glob("*/*.json") if m.name != "inputs.json"}


def _filled(root: Path, sizes: list[int]) -> list[tuple[TextStore, str, list[str]]]:
    """One segment per size (its texts distinct from every other's), alternately in a documents' and a queries'
    store; each with the texts it holds."""
    made = []
    for n, size in enumerate(sizes):
        store = TextStore(root, {"kind": ("doc", "query")[n % 2], "model": {"name": "m"}})
        texts = [f"segment {n} text {i}" for i in range(size)]
        before = set(_segments(root))
        store.add(texts, np.full((size, 8), n, np.float32))
        (name,) = set(_segments(root)) - before
        made.append((store, name, texts))
    return made


@settings(derandomize=True, deadline=None, max_examples=30)
@given(st.lists(st.integers(1, 40), min_size=2, max_size=6), st.data())
def test_prune_by_size_removes_the_least_recently_used_segments_first(sizes, data):
    accesses = data.draw(st.lists(st.integers(0, len(sizes) - 1), max_size=10))
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        made = _filled(root, sizes)
        manifests = _segments(root)
        start = time.time() - 10_000
        last_use = {name: start - n for n, (_, name, _) in enumerate(made)}  # written long ago, in this order
        for step, segment in enumerate(accesses):  # then used in this order: the last use is what counts
            last_use[made[segment][1]] = start + 1 + step
        for name, when in last_use.items():
            _stamp(manifests[name], when)
        size = {name: sum(f.stat().st_size for f in root.glob(f"texts/*/{name}.*")) for name in manifests}
        limit = data.draw(st.integers(0, sum(size.values())))
        kept, total = set(manifests), sum(size.values())
        for name in sorted(manifests, key=last_use.get):  # the LRU model: the oldest use goes first
            if total <= limit:
                break
            kept.discard(name)
            total -= size[name]
        prune_cache(root, max_bytes=limit)
        assert set(_segments(root)) == kept


@settings(derandomize=True, deadline=None, max_examples=20)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=5), st.data())
def test_a_lookup_marks_the_segments_it_served_used_and_only_those(sizes, data):
    used = data.draw(st.sets(st.integers(0, len(sizes) - 1)))
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        made = _filled(root, sizes)
        long_ago = time.time() - 40 * 86400
        for manifest in _segments(root).values():
            _stamp(manifest, long_ago)
        for n in sorted(used):  # a later run, with stores of its own, reads one text of each used segment
            store, _, texts = made[n]
            rows, vectors = TextStore(root, store.inputs).lookup(texts[:1])
            assert list(rows) == [0] and (vectors == n).all()
        prune_cache(root, older_than_s=30 * 86400)
        assert set(_segments(root)) == {made[n][1] for n in used}


def test_compact_starts_the_next_group_with_the_segment_that_overflows(tmp_path):
    store = TextStore(tmp_path, {"kind": "doc", "model": {"name": "m"}, "dtype": "float32"})
    texts = ["one", "two", "three", "four"]
    vectors = np.random.default_rng(3).normal(size=(4, 5)).astype(np.float32)
    for text, vector in zip(texts, vectors):
        store.add([text], vector[None])  # four segments of one row each
    store.compact(max_rows=2)
    manifests = [p for p in store.folder.glob("*.json") if p.name != "inputs.json"]
    assert sorted(json.loads(p.read_text())["rows"] for p in manifests) == [2, 2]
    fresh = TextStore(tmp_path, store.inputs)  # another process: only what is on disk
    for text, vector in zip(texts, vectors):
        rows, found = fresh.lookup([text])
        assert rows.tolist() == [0]
        np.testing.assert_array_equal(found[0], vector)
    assert fresh.rejected == 0


@pytest.mark.parametrize("opened_before", [False, True])
@pytest.mark.parametrize("asks", ["gather", "holds"])
def test_segments_merged_away_by_another_process_while_a_reader_lists_them_are_found_merged(
    tmp_path, opened_before, asks
):
    """A Ray worker compacts its segments while the driver gathers a finished shard: the driver listed the parts,
    then they were merged away before it read them; it must find the vectors in the merged segment."""
    inputs = {"kind": "doc", "model": {"name": "m"}, "dtype": "float32"}
    writer, reader = TextStore(tmp_path, inputs), TextStore(tmp_path, inputs)
    texts = [f"text {n}" for n in range(6)]
    vectors = np.random.default_rng(5).normal(size=(6, 4)).astype(np.float32)
    for start in (0, 2, 4):
        writer.add(texts[start : start + 2], vectors[start : start + 2])
    if opened_before:
        assert reader.holds(text_digests(texts)).all()  # the parts are opened and kept by the reader
    listed = reader.segments

    def stale_listing():
        parts = listed()
        if not stale_listing.merged:
            stale_listing.merged = True
            writer.compact()  # between the reader's listing and its reads
        return parts

    stale_listing.merged = False
    reader.segments = stale_listing
    if asks == "holds":
        assert reader.holds(text_digests(texts)).all() and stale_listing.merged
    else:
        found = reader.gather(text_digests(texts))
        assert stale_listing.merged and found is not None
        np.testing.assert_array_equal(found, vectors)
    assert len([p for p in tmp_path.glob("texts/*/*.json") if p.name != "inputs.json"]) == 1


def _sha_words(text: str) -> list[int]:
    """The three big-endian 64-bit words of bytes 0-23 of the text's sha256 (hashlib, word by word)."""
    raw = hashlib.sha256(text.encode("utf-8")).digest()
    return [int.from_bytes(raw[8 * n : 8 * n + 8], "big") for n in range(3)]


@pytest.mark.parametrize("differs", [1, 2])
def test_a_digest_sharing_a_stored_texts_key_but_not_its_other_words_is_not_held(tmp_path, differs):
    """A text whose sha256 shares a stored text's first 8 bytes (the sorted key) but not word `differs` is another
    text: not held, so its vector is stored; then each of the two is found with its own vector."""
    inputs = {"kind": "doc", "model": {"name": "m"}, "dtype": "float32"}
    store = TextStore(tmp_path, inputs)
    texts = ["alpha", "beta", "gamma"]
    vectors = np.random.default_rng(7).normal(size=(4, 5)).astype(np.float32)
    store.add(texts, vectors[:3])
    stored = [_sha_words(text) for text in texts]
    twin = list(stored[1])
    twin[differs] ^= 1  # the key of "beta", another check word
    asked = np.array([*stored, twin], dtype=np.uint64)
    held = TextStore(tmp_path, inputs).holds(asked)
    assert held.tolist() == [True, True, True, False]
    writer = TextStore(tmp_path, inputs)
    writer.add((), vectors[3:][~held[3:]], asked[3:][~held[3:]])  # what a corpus entry keeps: the texts not held
    found = TextStore(tmp_path, inputs).gather(asked)
    assert found is not None
    np.testing.assert_array_equal(found, vectors)
