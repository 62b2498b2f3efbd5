"""Datasets: the real BEIR nfcorpus archive through a loopback server, import, remove, list, resolve,
interruption and concurrency."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.datasets import registry
from harness.datasets.catalog import (
    STAMP,
    download_dataset,
    import_dataset,
    list_datasets,
    read_stamp,
    remove_dataset,
    resolve_dataset,
)
from harness.errors import ChecksumMismatchError, DatasetError, DownloadError, UnsafeArchiveError
from harness.io.download import RetryPolicy

NFCORPUS_MD5 = "a89dba18a62ef92f7d323ec890a0d38d"
FAST = RetryPolicy(attempts=3, backoff=0.01, connect_timeout=2, read_timeout=1)


@pytest.fixture
def nfcorpus_zip(shared_beir) -> Path:
    path = shared_beir.parent / "beir-zips" / "nfcorpus.zip"
    if not path.is_file():
        pytest.skip("../shared/data/beir-zips/nfcorpus.zip is not present")
    return path


@pytest.fixture
def mirror(http_server, nfcorpus_zip):
    http_server.files["/nfcorpus.zip"] = nfcorpus_zip.read_bytes()
    return http_server


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name != ".locks")


def test_download_real_nfcorpus_verifies_md5_and_counts(mirror, tmp_path):
    installed = download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert installed.path == tmp_path / "nfcorpus"
    stamp = read_stamp(installed.path)
    assert stamp["md5"] == NFCORPUS_MD5 and stamp["source"] == mirror.url + "nfcorpus.zip"
    assert (stamp["n_docs"], stamp["n_queries"]) == (3633, 323)
    assert _leftovers(tmp_path) == ["nfcorpus"]  # archive removed, no temporary folders
    content = (installed.path / "qrels" / "test.tsv").read_bytes()
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir" / "nfcorpus" / "qrels" / "test.tsv"
    assert content == shared.read_bytes()
    # A second call is a no-op: nothing is fetched.
    download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert len(mirror.requests) == 1


def test_interrupted_download_resumes(mirror, tmp_path):
    mirror.behaviours = ["drop:1000000"]
    download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert read_stamp(tmp_path / "nfcorpus")["md5"] == NFCORPUS_MD5
    # One more request, resuming where the drop left the part file: at most one 64 KiB read was lost.
    assert len(mirror.requests) == 2 and mirror.requests[0][1] is None
    resumed_at = int(mirror.requests[1][1].removeprefix("bytes=").removesuffix("-"))
    assert 1_000_000 - 65_536 < resumed_at <= 1_000_000


def test_failed_download_leaves_nothing_that_looks_installed(mirror, tmp_path):
    mirror.behaviours = ["drop:1000000"] + ["status:503"] * 5
    with pytest.raises(DownloadError, match="giving up"):
        download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert _leftovers(tmp_path) == ["nfcorpus.zip.part"]
    assert read_stamp(tmp_path / "nfcorpus") is None
    kept = (tmp_path / "nfcorpus.zip.part").stat().st_size
    assert len(mirror.requests) == 3  # the drop, then two 503s
    mirror.behaviours = []
    download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)  # resumes by itself
    assert _leftovers(tmp_path) == ["nfcorpus"]
    assert mirror.requests[3:] == [("/nfcorpus.zip", f"bytes={kept}-")]  # one request, from the kept bytes


def test_wrong_bytes_are_refused(mirror, tmp_path):
    data = bytearray(mirror.files["/nfcorpus.zip"])
    data[-100] ^= 0xFF
    mirror.files["/nfcorpus.zip"] = bytes(data)
    with pytest.raises(ChecksumMismatchError, match=f"expected {NFCORPUS_MD5}"):
        download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert _leftovers(tmp_path) == []


def test_interrupted_extraction_leaves_no_complete_looking_folder(mirror, tmp_path, monkeypatch):
    import harness.datasets.catalog

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(harness.datasets.catalog, "_check_counts", crash)
    with pytest.raises(KeyboardInterrupt):
        download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert _leftovers(tmp_path) == ["nfcorpus.zip"]  # verified archive kept, no folder
    monkeypatch.undo()
    download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert len(mirror.requests) == 1  # the verified archive was reused
    assert _leftovers(tmp_path) == ["nfcorpus"]


def test_unstamped_folder_is_not_trusted(mirror, tmp_path):
    (tmp_path / "nfcorpus").mkdir()
    (tmp_path / "nfcorpus" / "corpus.jsonl").write_text("half")
    download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert read_stamp(tmp_path / "nfcorpus")["md5"] == NFCORPUS_MD5
    assert mirror.requests == [("/nfcorpus.zip", None)]  # downloaded afresh, not taken for installed
    with open(tmp_path / "nfcorpus" / "corpus.jsonl") as handle:
        assert sum(1 for _ in handle) == 3633  # the half file was replaced


def test_counts_that_disagree_with_the_registry(mirror, tmp_path, monkeypatch):
    specs = dict(registry.datasets())
    specs["nfcorpus"] = replace(specs["nfcorpus"], n_docs=9999)
    monkeypatch.setattr(registry, "datasets", lambda: specs)
    with pytest.raises(DatasetError, match="the archive has 3,633 documents .* the registry expects 9,999"):
        download_dataset("nfcorpus", tmp_path, mirror.url, policy=FAST, progress=False)
    assert read_stamp(tmp_path / "nfcorpus") is None
    assert [p for p in _leftovers(tmp_path) if p.startswith(".")] == []


def _bad_archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("member", "why"),
    [
        ("../escape.txt", "leaves the target folder"),
        ("/abs/escape.txt", "has an absolute path"),
        ("tiny/../../escape.txt", "leaves the target folder"),
    ],
)
def test_served_unsafe_archive_is_refused(http_server, tmp_path, monkeypatch, member, why):
    data = _bad_archive({"tiny/corpus.jsonl": b"{}\n", member: b"x"})
    http_server.files["/tiny.zip"] = data
    spec = replace(registry.get("scifact"), name="tiny", md5=hashlib.md5(data).hexdigest(), zip_mb=None)
    specs = {**registry.datasets(), "tiny": spec}
    monkeypatch.setattr(registry, "datasets", lambda: specs)
    with pytest.raises(UnsafeArchiveError, match=re.escape(f"{member!r} {why}")):
        download_dataset("tiny", tmp_path / "data", http_server.url, policy=FAST, progress=False)
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "data" / "escape.txt").exists()
    assert [p for p in _leftovers(tmp_path / "data") if p != "tiny.zip"] == []


def test_not_distributed_and_unknown_names(tmp_path):
    with pytest.raises(DatasetError, match="bioasq is not distributed by BEIR.*beir-harness convert"):
        download_dataset("bioasq", tmp_path)
    with pytest.raises(DatasetError, match="did you mean scifact"):
        download_dataset("scifct", tmp_path)
    for bad in ("../../etc", "a/b", "", ".hidden", "x\x00y"):
        with pytest.raises(DatasetError) as caught:
            download_dataset(bad, tmp_path)
        assert str(caught.value) == f"{bad!r} is not a valid dataset name (one folder name: letters, digits, - and _)"
    assert list(tmp_path.iterdir()) == []  # refused before anything was created


def test_import_zip_and_folder_then_remove(nfcorpus_zip, tiny_beir, tmp_path):
    root = tmp_path / "data"
    installed = import_dataset(nfcorpus_zip, root)
    assert installed.stamp["md5"] == NFCORPUS_MD5 and installed.stamp["n_docs"] == 3633
    with pytest.raises(DatasetError, match="already installed; pass `force`"):
        import_dataset(nfcorpus_zip, root)
    folder = import_dataset(tiny_beir, root)
    assert folder.name == "tiny" and (root / "tiny" / "qrels" / "test.tsv").is_file()
    assert read_stamp(root / "tiny")["source"] == str(tiny_beir.resolve())
    assert [p.name for p in remove_dataset("nfcorpus", root)] == ["nfcorpus"]
    assert _leftovers(root) == ["tiny"]
    with pytest.raises(DatasetError, match="nothing to remove"):
        remove_dataset("nfcorpus", root)


def test_import_refuses_wrong_md5_and_invalid_folders(nfcorpus_zip, tiny_beir, tmp_path):
    wrong = tmp_path / "nfcorpus.zip"
    wrong.write_bytes(_bad_archive({"nfcorpus/corpus.jsonl": b"{}\n"}))
    with pytest.raises(ChecksumMismatchError, match="is not nfcorpus's"):
        import_dataset(wrong, tmp_path / "data")
    (tiny_beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tnope\t1\n")
    with pytest.raises(DatasetError) as caught:
        import_dataset(tiny_beir, tmp_path / "data")
    # The one line names the folder, then the first problem's file and line and what is wrong there.
    assert str(caught.value).startswith(f"{tiny_beir}: not a valid BEIR folder (1 error(s), first: ")
    assert f"{tiny_beir / 'qrels' / 'test.tsv'}:2: document 'nope' is not in corpus.jsonl" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "data").exists()  # the data dir it made is removed again: no empty folder left


def test_list_and_resolve(nfcorpus_zip, tiny_beir, tmp_path):
    root = tmp_path / "data"
    import_dataset(nfcorpus_zip, root)
    rows = {row["name"]: row for row in list_datasets(root)}
    assert (
        len(rows) == 19 + 13
        and rows["nanobeir/scifact"]["family"] == "NanoBEIR"
        and rows["nfcorpus"]["installed"]
        and not rows["scifact"]["installed"]
    )
    assert rows["nfcorpus"]["published_scores"] == 53 and rows["arguana"]["ignore_identical_ids"]
    assert resolve_dataset("nfcorpus", root) == (root / "nfcorpus", "nfcorpus")
    assert resolve_dataset(tiny_beir, root) == (tiny_beir, "tiny")
    with pytest.raises(DatasetError, match="scifact is not installed .* drop --no-download"):
        resolve_dataset("scifact", root, download=False)
    with pytest.raises(DatasetError, match="evaluate one, e.g. cqadupstack/android"):
        resolve_dataset("cqadupstack", root)
    with pytest.raises(DatasetError, match="not a BEIR dataset name"):
        resolve_dataset("no-such-thing", root)


def test_evaluate_a_registry_name_downloads_it(mirror, tmp_path, monkeypatch):
    run = tmp_path / "r.trec"
    run.write_text("PLAIN-2 Q0 MED-2427 1 1.0 x\n")
    monkeypatch.setenv("BEIR_HARNESS_MIRROR", mirror.url)
    result = invoke(
        [
            "-q",
            "evaluate",
            "nfcorpus",
            "--data-dir",
            str(tmp_path / "data"),
            "--run",
            str(run),
            "--k",
            "10",
            "--output-dir",
            str(tmp_path / "res"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dataset"] == "nfcorpus" and data["n_queries"] == 323
    assert data["config"]["self_hit_policy_source"] == "registry"


def test_cli_datasets_commands(mirror, nfcorpus_zip, tmp_path, monkeypatch):
    root = str(tmp_path / "data")
    monkeypatch.setenv("BEIR_HARNESS_DATA_DIR", root)
    result = invoke(["-q", "datasets", "download", "nfcorpus", "--base-url", mirror.url])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"nfcorpus: {root}/nfcorpus"
    listing = invoke(["datasets", "list"]).stdout
    assert any(line.startswith("nfcorpus") and " yes " in line for line in listing.splitlines())
    assert json.loads(invoke(["datasets", "list", "--json"]).stdout)[0]["name"] == "msmarco"
    assert invoke(["datasets", "remove", "nfcorpus"]).stdout.startswith("removed")
    result = invoke(["datasets", "import", str(nfcorpus_zip)])
    assert result.exit_code == 0 and "nfcorpus:" in result.stdout
    result = invoke(["datasets", "download", "robust04"])
    assert result.exit_code == 1 and "not distributed" in result.stderr
    result = invoke(["datasets", "download", "fiqa", "--base-url", "ftp://127.0.0.1/"])
    assert result.exit_code == 1 and "only http(s)" in result.stderr
    for command in (
        ["datasets"],
        ["datasets", "list"],
        ["datasets", "download"],
        ["datasets", "import"],
        ["datasets", "remove"],
    ):
        assert "Example:" in invoke([*command, "--help"]).stdout


def test_two_processes_downloading_at_once(mirror, tmp_path):
    root = tmp_path / "data"
    command = [
        sys.executable,
        "-m",
        "harness",
        "-q",
        "datasets",
        "download",
        "nfcorpus",
        "--data-dir",
        str(root),
        "--base-url",
        mirror.url,
    ]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert read_stamp(root / "nfcorpus")["md5"] == NFCORPUS_MD5
    assert _leftovers(root) == ["nfcorpus"]
    assert len(mirror.requests) == 1  # the second waited for the lock and found it installed
    assert (root / "nfcorpus" / STAMP).is_file()


def test_download_killed_mid_stream_resumes_in_a_new_process(mirror, tmp_path):
    import os
    import signal
    import time

    root = tmp_path / "data"
    mirror.behaviours = ["slow:20"]
    command = [
        sys.executable,
        "-m",
        "harness",
        "-q",
        "datasets",
        "download",
        "nfcorpus",
        "--data-dir",
        str(root),
        "--base-url",
        mirror.url,
    ]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    part = root / "nfcorpus.zip.part"
    deadline = time.monotonic() + 30
    while not (part.exists() and part.stat().st_size > 300_000) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    kept = part.stat().st_size
    assert 0 < kept < len(mirror.files["/nfcorpus.zip"]) and read_stamp(root / "nfcorpus") is None
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert read_stamp(root / "nfcorpus")["md5"] == NFCORPUS_MD5
    assert mirror.requests[-1][1] == f"bytes={kept}-"  # resumed where the killed process stopped
    assert _leftovers(root) == ["nfcorpus"]


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGINT"])
def test_download_killed_mid_extraction_then_rerun_installs_cleanly(mirror, tmp_path, sig):
    import signal

    from conftest import start_paused

    root = tmp_path / "data"
    args = ["-q", "datasets", "download", "nfcorpus", "--data-dir", str(root), "--base-url", mirror.url]
    # Stopped before the third member is opened: two files extracted into the staging folder.
    proc = start_paused(tmp_path / "marker", "call", "zipfile:ZipFile.open", 3, args)
    proc.send_signal(getattr(signal, sig))
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    if sig == "SIGINT":
        assert proc.returncode == 130 and "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1].startswith("interrupted:")
    assert read_stamp(root / "nfcorpus") is None  # nothing that looks installed
    assert not (root / "nfcorpus").exists()
    rerun = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert read_stamp(root / "nfcorpus")["md5"] == NFCORPUS_MD5
    assert _leftovers(root) == ["nfcorpus"]  # the killed run's archive and staging folder are gone


def test_nothing_in_a_downloaded_dataset_is_ever_executed(http_server, tmp_path, monkeypatch):
    tiny = Path(__file__).parent / "data" / "tiny"
    marker = tmp_path / "executed"
    payload = f"open({str(marker)!r}, 'w').close()\n".encode()
    members = {f"tiny/{p.relative_to(tiny).as_posix()}": p.read_bytes() for p in tiny.rglob("*") if p.is_file()}
    # Files Python or a shell would run if anything imported, sourced or executed them.
    members.update(
        {
            "tiny/__init__.py": payload,
            "tiny/sitecustomize.py": payload,
            "tiny/conftest.py": payload,
            "tiny/setup.py": payload,
            "tiny/qrels/__init__.py": payload,
            "tiny/run.sh": b"#!/bin/sh\ntouch " + str(marker).encode() + b"\n",
        }
    )
    data = _bad_archive(members)
    http_server.files["/tiny.zip"] = data
    spec = replace(
        registry.get("scifact"), name="tiny", md5=hashlib.md5(data).hexdigest(), zip_mb=None, n_docs=5, n_queries=3
    )
    specs = {**registry.datasets(), "tiny": spec}
    monkeypatch.setattr(registry, "datasets", lambda: specs)
    monkeypatch.chdir(tmp_path)
    result = invoke(
        [
            "-q",
            "evaluate",
            "tiny",
            "--model",
            "hash:32",
            "--data-dir",
            str(tmp_path / "data"),
            "--base-url",
            http_server.url,
            "--output-dir",
            str(tmp_path / "out"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "tiny" / "run.sh").is_file()  # extracted as data...
    assert not marker.exists()  # ...and never run
    assert not (tmp_path / "data" / "tiny" / "run.sh").stat().st_mode & 0o111  # nor made executable


def test_a_mistyped_dataset_path_suggests_its_siblings_and_a_file_its_folder(tiny_beir, tmp_path):

    typo = invoke(["evaluate", str(tmp_path / "tinny"), "--model", "bm25"])
    assert typo.exit_code == 1 and f"did you mean {tiny_beir}?" in typo.stderr
    (tiny_beir / "corpus.jsonl.gz").write_bytes(b"")
    file = invoke(["evaluate", str(tiny_beir / "corpus.jsonl.gz"), "--model", "bm25"])
    assert file.exit_code == 1 and f"is a file; pass the BEIR folder that holds it ({tiny_beir})" in file.stderr


@pytest.mark.parametrize(
    "base, why",
    [("http://127.0.0.1:9", "connection refused"), ("http://beir-mirror.invalid", "the server name does not resolve")],
)
def test_offline_downloads_fail_in_seconds_and_name_the_alternatives(tmp_path, monkeypatch, base, why):
    import socket
    import time

    lookup = socket.getaddrinfo

    def no_such_name(host, *args, **kwargs):  # the resolver's answer for a .invalid name, without asking it
        if host == "beir-mirror.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)  # a retry's backoff would sleep
    result = invoke(["datasets", "download", "scifact", "--base-url", base, "--data-dir", str(tmp_path)])
    assert waits == []  # an unknown host is not retried: it fails at once, whatever the machine's load
    assert result.exit_code == 1 and why in result.stderr
    assert "beir-harness datasets import FILE.zip" in result.stderr and "--base-url" in result.stderr
    assert "kept" not in result.stderr  # nothing was downloaded, so nothing is kept
    assert not (tmp_path / ".locks").exists() and not list(tmp_path.rglob("*.lock"))


def test_an_import_under_a_chosen_name_does_not_suggest_choosing_one(nfcorpus_zip, tmp_path):
    wrong = tmp_path / "scifact.zip"
    wrong.write_bytes(nfcorpus_zip.read_bytes())
    with pytest.raises(ChecksumMismatchError, match="pass `name` to import it under another name"):
        import_dataset(wrong, tmp_path / "data")
    with pytest.raises(ChecksumMismatchError, match=r"\(give it another name\)"):
        import_dataset(wrong, tmp_path / "data", name="scifact")
    import_dataset(nfcorpus_zip, tmp_path / "data")
    assert not (tmp_path / "data" / ".locks").exists()  # the lock is gone once the import is done
