"""fetch and safe_extract against a real loopback HTTP server with scripted faults."""

from __future__ import annotations

import hashlib
import io
import random
import stat
import zipfile

import pytest

from harness.errors import ChecksumMismatchError, DatasetError, DownloadError, UnsafeArchiveError
from harness.io.download import NET_CHUNK, RetryPolicy, fetch, md5_file, safe_extract

FAST = RetryPolicy(attempts=3, backoff=0.01, connect_timeout=2, read_timeout=1.5)  # a stall is 3 s


def _zip(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buffer.getvalue()


# Incompressible, so the archive is ~300 KB and a drop mid-stream leaves whole 64 KiB reads behind.
PAYLOAD = _zip({f"data/file{i}.bin": random.Random(i).randbytes(15_000) + str(i).encode() for i in range(20)})
MD5 = hashlib.md5(PAYLOAD).hexdigest()


@pytest.fixture
def served(http_server):
    http_server.files["/data.zip"] = PAYLOAD
    return http_server


def _fetch(served, tmp_path, **kwargs):
    options = {"md5": MD5, "policy": FAST, "progress": False}
    options.update(kwargs)
    return fetch(served.url + "data.zip", tmp_path / "data.zip", **options)


def test_normal_download_is_verified(served, tmp_path):
    path = _fetch(served, tmp_path)
    assert path.read_bytes() == PAYLOAD and md5_file(path) == MD5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.zip"]


def _resumed_at(request: tuple[str, str | None]) -> int:
    path, ranged = request
    assert path == "/data.zip" and ranged is not None and ranged.startswith("bytes=") and ranged.endswith("-")
    return int(ranged.removeprefix("bytes=").removesuffix("-"))


def test_dropped_connection_resumes_with_range(served, tmp_path):
    served.behaviours = ["drop:200000"]
    path = _fetch(served, tmp_path)
    assert path.read_bytes() == PAYLOAD
    # Two requests: the whole file, then the rest from what the part file held (at most one 64 KiB read lost).
    assert len(served.requests) == 2 and served.requests[0] == ("/data.zip", None)
    assert 200_000 - NET_CHUNK < _resumed_at(served.requests[1]) <= 200_000


@pytest.mark.parametrize("expected_size", [True, False], ids=["registry-size", "no-registry-size"])
@pytest.mark.parametrize("content_range", ["none", "*"], ids=["no-content-range", "unknown-total"])
def test_a_resume_whose_206_names_no_total_counts_the_bytes_already_held(
    served, tmp_path, content_range, expected_size
):
    # A 206 with no usable total in Content-Range: its Content-Length is only the rest, so the whole file is what
    # the part file already holds plus that. The reference is the body itself: its length and hashlib's md5.
    served.behaviours = ["drop:200000", f"range-total:{content_range}"]
    path = _fetch(
        served, tmp_path, md5=hashlib.md5(PAYLOAD).hexdigest(), expected_size=len(PAYLOAD) if expected_size else None
    )
    assert path == tmp_path / "data.zip"
    assert path.read_bytes() == PAYLOAD and md5_file(path) == hashlib.md5(PAYLOAD).hexdigest()
    assert len(served.requests) == 2 and served.requests[0] == ("/data.zip", None)
    assert 200_000 - NET_CHUNK < _resumed_at(served.requests[1]) <= 200_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.zip"]


def test_server_ignoring_range_restarts_cleanly(served, tmp_path):
    served.behaviours = ["drop:200000", "ignore-range"]
    assert _fetch(served, tmp_path).read_bytes() == PAYLOAD  # the 200 body replaced the part, not appended to it
    assert len(served.requests) == 2 and served.requests[0] == ("/data.zip", None)
    assert 200_000 - NET_CHUNK < _resumed_at(served.requests[1]) <= 200_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.zip"]


def test_leftover_part_file_is_resumed_by_a_later_run(served, tmp_path):
    (tmp_path / "data.zip.part").write_bytes(PAYLOAD[:7000])
    assert _fetch(served, tmp_path).read_bytes() == PAYLOAD
    assert served.requests == [("/data.zip", "bytes=7000-")]


def test_part_file_longer_than_the_file_starts_over(served, tmp_path):
    (tmp_path / "data.zip.part").write_bytes(PAYLOAD + b"junk")
    assert _fetch(served, tmp_path).read_bytes() == PAYLOAD
    # The resume range is refused (416), the part file dropped, and the next request asks for everything.
    assert served.requests == [("/data.zip", f"bytes={len(PAYLOAD) + 4}-"), ("/data.zip", None)]


def test_5xx_is_retried(served, tmp_path):
    served.behaviours = ["status:500", "status:503"]
    assert _fetch(served, tmp_path).read_bytes() == PAYLOAD
    assert served.requests == [("/data.zip", None)] * 3  # an error body is never kept to resume from


def test_persistent_5xx_gives_up_with_a_clear_error(served, tmp_path):
    served.behaviours = ["status:503"] * 5
    with pytest.raises(DownloadError, match="giving up after 3 attempts: HTTP 503"):
        _fetch(served, tmp_path)
    assert len(served.requests) == 3  # the policy's attempts, not one more
    assert not (tmp_path / "data.zip").exists()


def test_404_is_not_retried(served, tmp_path):
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(served.url + "missing.zip", tmp_path / "m.zip", policy=FAST, progress=False)
    assert len(served.requests) == 1 and list(tmp_path.iterdir()) == []


def test_html_page_is_never_saved_as_a_zip(served, tmp_path):
    served.behaviours = ["html"]
    with pytest.raises(DownloadError, match="HTML page, not a zip"):
        _fetch(served, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_non_zip_bytes_are_refused(served, tmp_path):
    served.files["/data.zip"] = b"definitely not a zip" * 100
    with pytest.raises(DownloadError, match="not a zip archive"):
        _fetch(served, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_wrong_md5_deletes_the_part_file(served, tmp_path):
    with pytest.raises(ChecksumMismatchError, match=f"expected {'0' * 32}, got {MD5}"):
        _fetch(served, tmp_path, md5="0" * 32)
    assert list(tmp_path.iterdir()) == []


def test_stall_past_the_read_timeout_is_retried_then_resumes(served, tmp_path):
    served.behaviours = ["stall:3"]
    assert _fetch(served, tmp_path).read_bytes() == PAYLOAD
    # The stalled answer gave no byte, so the retry asks for the whole file again (no empty Range).
    assert served.requests == [("/data.zip", None), ("/data.zip", None)]


def test_size_far_from_the_registry_is_refused_before_downloading(served, tmp_path):
    with pytest.raises(DownloadError, match="registry expects about 10,000,000"):
        _fetch(served, tmp_path, expected_size=10_000_000)
    assert list(tmp_path.iterdir()) == []
    _fetch(served, tmp_path, expected_size=len(PAYLOAD) + 5000)  # close enough passes


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x.zip", "file:///etc/passwd", "127.0.0.1/x.zip"])
def test_only_http_urls(tmp_path, url):
    with pytest.raises(DownloadError, match="only http"):
        fetch(url, tmp_path / "x.zip", policy=FAST, progress=False)


def test_redirect_to_another_scheme_is_refused(served, tmp_path):
    served.behaviours = ["redirect:file:///etc/passwd"]
    with pytest.raises(DownloadError, match="non-http"):
        _fetch(served, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_redirect_within_http_is_followed(served, tmp_path):
    served.behaviours = [f"redirect:{served.url}data.zip"]
    assert _fetch(served, tmp_path).read_bytes() == PAYLOAD


# --- extraction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "symlinks", "message"),
    [
        ({"ok/a.txt": b"a", "../evil.txt": b"x"}, None, "'../evil.txt' leaves the target folder"),
        ({"ok/../../evil.txt": b"x"}, None, "leaves the target folder"),
        ({"/etc/evil.txt": b"x"}, None, "has an absolute path"),
        ({"C:/evil.txt": b"x"}, None, "has an absolute path"),
        ({"ok\\..\\evil.txt": b"x"}, None, "leaves the target folder"),
        ({"ok/a.txt": b"a"}, {"ok/link": "/etc/passwd"}, "'ok/link' is a symbolic link"),
    ],
)
def test_unsafe_members_are_refused_before_anything_is_written(tmp_path, members, symlinks, message):
    archive = tmp_path / "bad.zip"
    archive.write_bytes(_zip(members, symlinks))
    with pytest.raises(UnsafeArchiveError, match=message):
        safe_extract(archive, tmp_path / "out", max_bytes=10**9)
    assert not (tmp_path / "out").exists()
    assert not (tmp_path.parent / "evil.txt").exists()


def test_duplicate_members_are_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("a.txt", b"1")
        with pytest.warns(UserWarning):
            zf.writestr("a.txt", b"2")
    archive = tmp_path / "dup.zip"
    archive.write_bytes(buffer.getvalue())
    with pytest.raises(UnsafeArchiveError, match="appears twice"):
        safe_extract(archive, tmp_path / "out", max_bytes=10**9)


def test_zip_bomb_total_size_and_ratio(tmp_path):
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(_zip({"zeros.bin": b"\0" * (20 * 2**20)}))
    with pytest.raises(UnsafeArchiveError, match="would expand"):
        safe_extract(archive, tmp_path / "out", max_bytes=10**12)
    archive.write_bytes(_zip({f"f{i}.txt": bytes(range(256)) * 100 for i in range(10)}))
    with pytest.raises(UnsafeArchiveError, match="would unpack to 256,000 bytes, more than the 100,000"):
        safe_extract(archive, tmp_path / "out", max_bytes=100_000)
    assert not (tmp_path / "out").exists()


def test_lying_member_size_is_caught(tmp_path):
    data = bytearray(_zip({"a.txt": b"hello world, more than declared"}))
    # Shrink the declared size in the central directory (after its signature PK\1\2 at +24).
    central = data.rfind(b"PK\x01\x02")
    data[central + 24 : central + 28] = (5).to_bytes(4, "little")
    archive = tmp_path / "liar.zip"
    archive.write_bytes(bytes(data))
    # zipfile reads only the declared 5 bytes, whose CRC is not the member's: a damaged member, said so.
    with pytest.raises(DatasetError, match=r"liar.zip: damaged member 'a.txt': Bad CRC-32 for file 'a.txt'$"):
        safe_extract(archive, tmp_path / "out", max_bytes=10**9)
    assert not (tmp_path / "out" / "a.txt").exists() or (tmp_path / "out" / "a.txt").stat().st_size <= 5


def test_not_a_zip(tmp_path):
    archive = tmp_path / "x.zip"
    archive.write_bytes(b"nope")
    with pytest.raises(DatasetError, match="not a valid zip archive"):
        safe_extract(archive, tmp_path / "out", max_bytes=10**9)


def test_good_archive_extracts(tmp_path):
    archive = tmp_path / "ok.zip"
    archive.write_bytes(PAYLOAD)
    safe_extract(archive, tmp_path / "out", max_bytes=10**9)
    assert len(list((tmp_path / "out" / "data").iterdir())) == 20
    assert (tmp_path / "out" / "data" / "file3.bin").read_bytes().endswith(b"3")


def test_the_one_retry_loop_backs_off_doubling_honours_a_named_wait_and_stops_at_the_attempts(monkeypatch):
    """`retrying` (the downloads' and the services' loop) against its rule written out: the n-th wait is
    backoff * 2**(n-1) unless the failure names one, at most `attempts` calls, anything but Retry stops at once."""
    from harness.io import download

    waits, calls, retried = [], [], []
    monkeypatch.setattr(download.time, "sleep", waits.append)
    script = [download.Retry("HTTP 503"), download.Retry("HTTP 429", wait=7.5), download.Retry("timeout"), "done"]

    def attempt():
        calls.append(len(calls))
        outcome = script[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def give_up(failure, attempts):
        return DownloadError(f"gave up after {attempts}: {failure}")

    assert download.retrying(attempt, 4, 0.5, "u", give_up, lambda: retried.append(1)) == "done"
    assert waits == [0.5, 7.5, 0.5 * 2**2] and len(calls) == 4 and len(retried) == 3
    calls.clear()
    with pytest.raises(DownloadError, match=r"^gave up after 3: timeout$"):
        download.retrying(attempt, 3, 0.5, "u", give_up)  # the same script: the third failure is the last try
    assert len(calls) == 3
    calls.clear()
    script[0] = DatasetError("not worth a retry")
    with pytest.raises(DatasetError):
        download.retrying(attempt, 5, 0.5, "u", give_up)
    assert len(calls) == 1
    with pytest.raises(ValueError, match="attempts must be at least 1"):
        download.retrying(attempt, 0, 0.5, "u", give_up)
