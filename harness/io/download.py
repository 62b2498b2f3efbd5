"""Verified, resumable downloads and safe zip extraction.

A download is only done once it is verified: bytes stream into ``<dest>.part`` while their md5
is computed; a dropped connection resumes with an HTTP ``Range`` request (or starts over when the
server ignores it); connection errors, timeouts and 5xx answers are retried with backoff (`retrying`: the one
retry loop, the OpenAI-compatible services' too); a 4xx,
an HTML page or bytes that are not a zip archive are errors. Only when the size and the md5
match is the part file renamed to ``dest``. A wrong md5 deletes the part file.

Extraction refuses absolute paths, ``..`` components, drive letters, symlinks, duplicate
members and archives that would unpack far beyond their expected size (zip bombs), and checks
the bytes actually written against each member's declared size.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import sys
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypeVar

from harness.errors import ChecksumMismatchError, DatasetError, DownloadError, UnsafeArchiveError, setting

logger = logging.getLogger(__name__)
T = TypeVar("T")

CHUNK = 1 << 20
# Bytes read from the network per step: a dropped connection loses at most this much.
NET_CHUNK = 1 << 16
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
PARQUET_MAGIC = (b"PAR1",)
# What a download must start with, by the kind of file asked for: an error page is refused before it is stored.
MAGIC = {"zip archive": ZIP_MAGIC, "parquet file": PARQUET_MAGIC}


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: attempts in all, first backoff (doubling), connect and read timeouts (s)."""

    attempts: int = 6
    backoff: float = 1.0
    connect_timeout: float = 15.0
    read_timeout: float = 60.0


def md5_file(path: str | Path) -> str:
    """The md5 hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_scheme(url: str) -> None:
    if not url.lower().startswith(("http://", "https://")):
        raise DownloadError(f"{url}: only http(s) URLs are allowed (check {setting('base_url')})")


def fetch(
    url: str,
    dest: str | Path,
    md5: str | None = None,
    expected_size: int | None = None,
    policy: RetryPolicy = RetryPolicy(),
    progress: bool = True,
    kind: str = "zip archive",
) -> Path:
    """Download `url` to `dest`, verified and resumable.

    Args:
        url: An http(s) URL.
        dest: Final path; the bytes go to ``dest + ".part"`` until verified.
        md5: Expected md5 hex digest; None skips the check (and says so in the log).
        expected_size: Approximate size in bytes from the registry; an offer more than 10 %
            away from it is refused before downloading.
        policy: Retries, backoff and timeouts.
        progress: Show a tqdm bar (bytes, rate, ETA) on stderr.
        kind: What the file is (a key of `MAGIC`): content that does not start like one is refused.

    Returns:
        `dest`.

    Raises:
        DownloadError: HTTP 4xx, HTML instead of a zip, retries exhausted, size mismatch.
        ChecksumMismatchError: The md5 differs (the part file is deleted).
    """
    import requests
    from tqdm.auto import tqdm

    _check_scheme(url)
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    session = requests.Session()
    bar = tqdm(
        desc=dest.name,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )

    def give_up(failure: Retry, attempts: int) -> DownloadError:
        kept = f" ({part.name} kept; rerun to resume)" if part.exists() else ""
        return DownloadError(f"{url}: giving up after {attempts} attempts: {failure}{kept}")

    try:
        digest, total = retrying(
            lambda: _attempt(session, url, part, expected_size, policy, bar, kind),
            policy.attempts,
            policy.backoff,
            url,
            give_up,
            log=logger,
        )
    finally:
        bar.close()
        session.close()
    size = part.stat().st_size
    if total is not None and size != total:
        part.unlink(missing_ok=True)
        raise DownloadError(f"{url}: received {size} bytes, the server announced {total}")
    got = digest.hexdigest()
    if md5 is None:
        logger.warning("%s: no md5 known; the download is not verified", url)
    elif got != md5:
        part.unlink(missing_ok=True)
        raise ChecksumMismatchError(
            f"{url}: md5 mismatch: expected {md5}, got {got}; the partial file was deleted "
            "(the server or a mirror serves different bytes)"
        )
    os.replace(part, dest)
    return dest


def _unreachable(exc: BaseException) -> str:
    """Why a connection failed for good ("name not resolved", "connection refused"), or "" when a retry may help."""
    text = repr(exc) + repr(exc.__cause__) + repr(exc.__context__)
    for marker, why in (
        ("NameResolution", "the server name does not resolve"),
        ("Name or service not known", "the server name does not resolve"),
        ("Temporary failure in name resolution", "the server name does not resolve"),
        ("nodename nor servname", "the server name does not resolve"),
        ("getaddrinfo failed", "the server name does not resolve"),
        ("Connection refused", "connection refused"),
        ("ConnectionRefused", "connection refused"),
        ("Network is unreachable", "network is unreachable"),
    ):
        if marker in text:
            return why
    return ""


class Retry(Exception):
    """A failure worth another attempt (a dropped connection, a timeout, a 5xx or 429 answer); `wait`, when given,
    is how long to wait before it instead of the backoff (a service's ``Retry-After``)."""

    def __init__(self, reason: str, wait: float | None = None):
        super().__init__(reason)
        self.wait = wait


def retrying(
    attempt: Callable[[], T],
    attempts: int,
    backoff: float,
    where: str,
    give_up: Callable[[Retry, int], Exception],
    on_retry: Callable[[], None] | None = None,
    log: logging.Logger = logger,
) -> T:
    """What `attempt()` returns, trying again after each `Retry` it raises, `attempts` tries at most; the n-th wait
    is ``backoff * 2**(n-1)`` seconds unless the failure names its own. Any other exception stops at once. Each
    retry calls `on_retry` and is logged (`log`) as ``<where>: <reason>; retrying in 2.0 s (attempt 3 of 6)``.

    Shared by the downloads (`fetch`) and the OpenAI-compatible services (`harness.io.service.ServiceClient`).

    Raises:
        The exception `give_up(the last failure, attempts)` makes, once every attempt failed (its context hidden).
        ValueError: `attempts` below 1.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except Retry as failure:
            if number == attempts:
                raise give_up(failure, number) from None
            wait = backoff * 2 ** (number - 1) if failure.wait is None else failure.wait
            if on_retry is not None:
                on_retry()
            log.warning("%s: %s; retrying in %.1f s (attempt %d of %d)", where, failure, wait, number + 1, attempts)
            time.sleep(wait)
    raise AssertionError("unreachable")


def _attempt(
    session, url: str, part: Path, expected_size: int | None, policy: RetryPolicy, bar, kind: str = "zip archive"
):
    """One HTTP request, resuming from the part file's length. Returns (md5 so far, total size)."""
    import requests

    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        response = session.get(
            url,
            headers=headers,
            stream=True,
            allow_redirects=True,
            timeout=(policy.connect_timeout, policy.read_timeout),
        )
    except requests.exceptions.InvalidSchema as exc:
        raise DownloadError(f"{url}: redirected to a non-http(s) URL: {exc}") from None
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        if _unreachable(exc):  # no network, or nothing listening: retrying would only wait
            kept = f"; the partial file {part.name} is kept for a later resume" if part.exists() else ""
            copy = "FOLDER --name nanobeir/NAME` (its .parquet files)" if kind == "parquet file" else "FILE.zip`"
            raise DownloadError(
                f"{url}: cannot reach the server ({_unreachable(exc)}): offline? Install the dataset "
                f"from a copy with `beir-harness datasets import {copy}, or download from a mirror "
                f"({setting('base_url')}){kept}"
            ) from None
        raise Retry(f"cannot connect: {type(exc).__name__}") from None
    with response:
        _check_scheme(response.url)
        if response.status_code == 416 and have:
            # Our part file is as long as (or longer than) the file: start over.
            part.unlink()
            raise Retry("server refused the resume range; starting over")
        if response.status_code >= 500:
            raise Retry(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise DownloadError(
                f"{url}: HTTP {response.status_code} {response.reason} (check the name or {setting('base_url')})"
            )
        content_type = response.headers.get("Content-Type", "")
        if "text/html" in content_type.lower():
            raise DownloadError(
                f"{url}: the server answered with an HTML page, not a zip archive "
                "(a login or error page? check --base-url)"
            )
        resumed = response.status_code == 206 and have
        if have and not resumed:
            logger.info("%s: the server ignored the resume request; starting over", url)
            have = 0
        total = _total_size(response, have)
        if expected_size and total and abs(total - expected_size) > 0.1 * expected_size + 100_000:
            raise DownloadError(
                f"{url}: the server offers {total:,} bytes, the registry expects about "
                f"{expected_size:,}; refusing (wrong file or mirror?)"
            )
        digest = hashlib.md5()
        if resumed:
            with open(part, "rb") as handle:
                for block in iter(lambda: handle.read(CHUNK), b""):
                    digest.update(block)
        bar.reset(total=total)
        bar.update(have)
        first = not resumed
        with open(part, "ab" if resumed else "wb") as handle:
            try:
                for block in response.iter_content(chunk_size=NET_CHUNK):
                    if first:
                        if not block.startswith(MAGIC[kind]):
                            handle.close()
                            part.unlink(missing_ok=True)
                            raise DownloadError(
                                f"{url}: the content is not a {kind} (starts with {block[:16]!r}; check --base-url)"
                            )
                        first = False
                    _write(handle, block, part)
                    digest.update(block)
                    bar.update(len(block))
            except (requests.exceptions.RequestException, ConnectionError, TimeoutError) as exc:
                raise Retry(f"connection lost after {handle.tell():,} bytes ({type(exc).__name__})") from None
        if total is not None and part.stat().st_size < total:
            raise Retry(f"connection closed after {part.stat().st_size:,} of {total:,} bytes")
        return digest, total


def _write(handle, block: bytes, part: Path) -> None:
    try:
        handle.write(block)
    except OSError as exc:
        raise DownloadError(f"{part}: cannot write: {exc.strerror or exc} (check free space)") from None


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit()  # str.isdigit() alone accepts "²", which int() refuses


def _total_size(response, have: int) -> int | None:
    if response.status_code == 206:
        content_range = response.headers.get("Content-Range", "")
        if "/" in content_range and _number(content_range.rsplit("/", 1)[1]):
            return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    if length and _number(length):
        return int(length) + (have if response.status_code == 206 else 0)
    return None


def _member_problem(info: zipfile.ZipInfo, seen: set[str]) -> str | None:
    name = info.filename
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if "\\" in name or ".." in PurePosixPath(name).parts:
        return "leaves the target folder"
    if "\x00" in name:
        return "has a NUL byte in its name"
    if name in seen:
        return "appears twice"
    return None


def safe_extract(archive: str | Path, target: str | Path, max_bytes: int, max_ratio: float = 200.0) -> None:
    """Extract a zip archive into `target` (which must not exist yet), refusing unsafe members.

    Args:
        archive: The zip file.
        target: A new folder to extract into.
        max_bytes: Refuse archives whose members add up to more than this (zip bomb).
        max_ratio: Refuse a member whose uncompressed/compressed ratio exceeds this (above 1 MiB).

    Raises:
        UnsafeArchiveError: An unsafe member or an oversized archive; nothing is extracted.
        DatasetError: Not a zip file, or a damaged one.
    """
    archive, target = Path(archive), Path(target)
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DatasetError(f"{archive}: not a valid zip archive ({exc})") from None
    with zf:
        members = zf.infolist()
        seen: set[str] = set()
        total = 0
        for info in members:
            problem = _member_problem(info, seen)
            if problem:
                raise UnsafeArchiveError(f"{archive}: member {info.filename!r} {problem}; refusing to extract")
            seen.add(info.filename)
            total += info.file_size
            if info.file_size > CHUNK and info.compress_size and info.file_size / info.compress_size > max_ratio:
                raise UnsafeArchiveError(
                    f"{archive}: member {info.filename!r} would expand "
                    f"{info.file_size / info.compress_size:.0f}x; refusing (zip bomb?)"
                )
        if total > max_bytes:
            raise UnsafeArchiveError(
                f"{archive}: would unpack to {total:,} bytes, more than the {max_bytes:,} "
                "expected; refusing (zip bomb?)"
            )
        target.mkdir(parents=True)
        for info in members:
            out = target.joinpath(*PurePosixPath(info.filename).parts)
            if info.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            written = 0
            try:
                with zf.open(info) as source, open(out, "wb") as sink:
                    for block in iter(lambda: source.read(CHUNK), b""):
                        written += len(block)
                        # Headers can lie; count what really comes out.
                        if written > info.file_size:
                            raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is larger than declared")
                        sink.write(block)
            except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
                raise DatasetError(f"{archive}: damaged member {info.filename!r}: {exc}") from None
