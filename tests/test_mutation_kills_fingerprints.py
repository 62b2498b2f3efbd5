"""Data fingerprints and bench's staleness rule, on changes that keep the file's size (mutation testing:
docs/mutation-report.md).

Every earlier "changed file" also changed size, so a memo keyed by size alone, or a staleness check that
skipped one file, passed. Here each fingerprinted file (corpus, queries, qrels, an external run) is changed
in turn to content of the same length; the reference is hashlib's sha256 of the bytes written here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.io.formats import locate_beir_folder
from harness.pipeline.bench import _changed_data
from harness.pipeline.config import EvaluateConfig
from harness.reporting.report import folder_fingerprints

TINY = Path(__file__).parent / "data" / "tiny"
FILES = {"corpus": "corpus.jsonl", "queries": "queries.jsonl", "qrels": "qrels/test.tsv"}
WORDS = {"the corpus": "corpus", "the queries": "queries", "the judgments": "qrels"}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def same_size_change(path: Path, keep_mtime: bool = False) -> None:
    """Rewrite `path` in place with one byte changed (a digit or letter swapped), the size unchanged."""
    data = bytearray(path.read_bytes())
    before = path.stat()
    for i in range(len(data) - 1, -1, -1):
        if chr(data[i]).isalnum():
            data[i] = ord("1") if data[i] != ord("1") else ord("2")
            break
    path.write_bytes(bytes(data))
    after = path.stat()
    assert after.st_size == before.st_size
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:  # a later mtime, whatever the file system's clock granularity
        os.utime(path, ns=(after.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def replace_keeping_size_and_mtime(path: Path) -> None:
    """Write new content of the same size to a sibling and rename it over `path`, the old mtime restored."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[-2] = ord("7") if data[-2] != ord("7") else ord("8")
    sibling = path.with_name(path.name + ".new")
    sibling.write_bytes(bytes(data))
    os.utime(sibling, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(sibling, path)
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns


@pytest.fixture
def folder(tmp_path):
    target = tmp_path / "tiny"
    shutil.copytree(TINY, target)
    return target


def fingerprints_by_hand(root: Path) -> dict[str, str]:
    return {name: sha256_of(root / file) for name, file in FILES.items()}


@pytest.mark.parametrize("name", FILES)
def test_a_same_size_change_gives_a_new_fingerprint(folder, name):
    assert folder_fingerprints(locate_beir_folder(folder, "test")) == fingerprints_by_hand(folder)
    same_size_change(folder / FILES[name])
    assert folder_fingerprints(locate_beir_folder(folder, "test")) == fingerprints_by_hand(folder)


@pytest.mark.parametrize("name", FILES)
def test_a_file_replaced_by_one_of_the_same_size_and_mtime_gives_a_new_fingerprint(folder, name):
    assert folder_fingerprints(locate_beir_folder(folder, "test")) == fingerprints_by_hand(folder)
    replace_keeping_size_and_mtime(folder / FILES[name])
    assert folder_fingerprints(locate_beir_folder(folder, "test")) == fingerprints_by_hand(folder)


def test_two_folders_of_same_sized_files_are_told_apart(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(TINY, first)
    shutil.copytree(TINY, second)
    for file in FILES.values():
        same_size_change(second / file)
        stat = (first / file).stat()
        os.utime(second / file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert folder_fingerprints(locate_beir_folder(first, "test")) == fingerprints_by_hand(first)
    assert folder_fingerprints(locate_beir_folder(second, "test")) == fingerprints_by_hand(second)
    assert fingerprints_by_hand(first) != fingerprints_by_hand(second)


def _run_file(tmp_path: Path) -> Path:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.5 tag\nq1 Q0 d2 2 1.5 tag\n")
    return run


def _stored(folder: Path, run: Path | None):
    fingerprints = fingerprints_by_hand(folder)
    if run is not None:
        fingerprints["run"] = sha256_of(run)
    return SimpleNamespace(fingerprints=fingerprints)


@pytest.mark.parametrize("with_run", [False, True])
def test_bench_sees_nothing_changed_on_the_same_data(folder, tmp_path, with_run):
    run = _run_file(tmp_path) if with_run else None
    config = EvaluateConfig(dataset_path=folder, run_path=run)
    assert _changed_data(config, _stored(folder, run)) == []


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("keep_mtime", [False, True])
def test_bench_names_each_data_file_changed_alone_at_the_same_size(folder, tmp_path, name, keep_mtime):
    run = _run_file(tmp_path)
    stored = _stored(folder, run)
    if keep_mtime:
        replace_keeping_size_and_mtime(folder / FILES[name])
    else:
        same_size_change(folder / FILES[name])
    changed = _changed_data(EvaluateConfig(dataset_path=folder, run_path=run), stored)
    assert [WORDS.get(c, c) for c in changed] == [name]


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_bench_names_a_run_file_changed_at_the_same_size(folder, tmp_path, keep_mtime):
    run = _run_file(tmp_path)
    stored = _stored(folder, run)
    (replace_keeping_size_and_mtime if keep_mtime else same_size_change)(run)
    assert _changed_data(EvaluateConfig(dataset_path=folder, run_path=run), stored) == ["the run file"]


def test_a_result_without_a_run_fingerprint_is_not_stale_for_its_run(folder, tmp_path):
    run = _run_file(tmp_path)
    stored = _stored(folder, None)  # written before runs were fingerprinted
    assert _changed_data(EvaluateConfig(dataset_path=folder, run_path=run), stored) == []


def test_a_folder_that_cannot_be_read_counts_as_changed(folder, tmp_path):
    stored = _stored(folder, None)
    shutil.rmtree(folder)
    assert _changed_data(EvaluateConfig(dataset_path=folder), stored) == ["the dataset folder"]


def test_every_file_changed_is_named(folder, tmp_path):
    run = _run_file(tmp_path)
    stored = _stored(folder, run)
    for file in [*FILES.values()]:
        same_size_change(folder / file)
    same_size_change(run)
    changed = _changed_data(EvaluateConfig(dataset_path=folder, run_path=run), stored)
    assert sorted(WORDS.get(c, c) for c in changed) == sorted([*FILES, "the run file"])


def test_the_data_tag_changes_with_each_fingerprint_and_nothing_else():
    import re

    from harness.reporting.report import data_tag

    base = {"corpus": "a" * 64, "queries": "b" * 64, "qrels": "c" * 64}
    tag = data_tag(SimpleNamespace(fingerprints=base))
    assert re.fullmatch(r"[0-9a-f]{8}", tag)
    assert data_tag(SimpleNamespace(fingerprints={**base, "run": "d" * 64})) == tag  # the run is not the data
    seen = {tag}
    for name in base:
        other = data_tag(SimpleNamespace(fingerprints={**base, name: "e" * 64}))
        assert other not in seen
        seen.add(other)
    # the files stay apart: the same three values in another order are other data
    assert data_tag(SimpleNamespace(fingerprints={"corpus": "b" * 64, "queries": "a" * 64, "qrels": "c" * 64})) != tag


def test_a_file_one_side_does_not_record_is_not_compared():
    from harness.reporting.report import data_changes

    recorded = {"corpus": "a", "queries": "b", "qrels": "c"}
    assert data_changes(recorded, {"corpus": "a", "queries": "b", "qrels": "c"}) == []
    assert data_changes(recorded, {"corpus": "x", "queries": "y", "qrels": "z"}) == ["corpus", "queries", "qrels"]
    assert data_changes({"corpus": "a"}, {"corpus": "a", "queries": "y"}) == []
    assert data_changes({"corpus": "", "queries": "b"}, {"corpus": "x", "queries": "y"}) == ["queries"]
    assert data_changes({"corpus": "a", "qrels": "c"}, {"corpus": "x", "qrels": ""}) == ["corpus"]


def test_the_staleness_check_never_downloads(folder, monkeypatch):
    import harness.pipeline.bench as bench

    calls = []
    real = bench.resolve_dataset

    def spy(*args, **kwargs):
        calls.append(kwargs.get("download"))
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "resolve_dataset", spy)
    assert _changed_data(EvaluateConfig(dataset_path=folder), _stored(folder, None)) == []
    assert calls == [False]


def test_the_data_tag_is_stable_across_versions():
    # a report names mixed data "scifact [data 1a2b3c4d]": the tag of given fingerprints must never change
    from harness.reporting.report import data_tag

    prints = {"corpus": "a" * 64, "queries": "b" * 64, "qrels": "c" * 64}
    by_hand = hashlib.sha256(("a" * 64 + "\n" + "b" * 64 + "\n" + "c" * 64).encode()).hexdigest()[:8]
    assert data_tag(SimpleNamespace(fingerprints=prints)) == by_hand
    older = {"corpus": "a" * 64, "queries": "b" * 64}  # a result written before qrels were fingerprinted
    assert (
        data_tag(SimpleNamespace(fingerprints=older))
        == hashlib.sha256(("a" * 64 + "\n" + "b" * 64 + "\n").encode()).hexdigest()[:8]
    )
