"""Reading a data file as bytes: plain or gzip, line by line with its digest fed in the same pass, ids a TREC line
can hold, and how a reader reports a bad line (raise, or hand it to a collector and skip it)."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from harness.errors import FormatError


@contextlib.contextmanager
def open_binary(path: Path) -> Iterator[IO[bytes]]:
    try:
        handle: IO[bytes] = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")
    except OSError as exc:
        raise FormatError(path, f"cannot open: {exc.strerror or exc}") from exc
    with handle:
        yield handle


def content_sha256(path: str | Path) -> str:
    """sha256 of a file's uncompressed content (a ``.gz`` file is hashed as its decompressed bytes)."""
    return content_digest(path)[0]


def content_digest(path: str | Path, check_ids: bool = False) -> tuple[str, int]:
    """(sha256, number of lines) of a file's uncompressed content, in one pass.

    The line count includes blank lines, so for a JSONL file it is an upper bound on its records.

    Args:
        path: The file.
        check_ids: Also refuse a JSONL record whose ``_id`` contains whitespace (see `check_trec_id`),
            without parsing every line: only ids that are not plain ASCII words are decoded.

    Raises:
        FormatError: The file cannot be read, or (with `check_ids`) an id holds whitespace.
    """
    path = Path(path)
    digest = hashlib.sha256()
    lines, last, carry = 0, b"", b""
    with open_binary(path) as handle:
        try:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
                if check_ids:
                    # Scan whole lines only; the unfinished last line waits for the next block.
                    cut = block.rfind(b"\n") + 1
                    if cut:
                        _scan_ids(path, carry + block[:cut], lines)
                        carry = block[cut:]
                    else:
                        carry += block
                lines += block.count(b"\n")
                last = block[-1:]
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise FormatError(path, f"cannot read: {exc}", hint="the file is damaged or truncated") from exc
    if check_ids and carry:
        _scan_ids(path, carry, lines)
    return digest.hexdigest(), lines + (last not in (b"", b"\n"))


# The "_id" member of a JSONL record; the id's raw bytes are group 1 (JSON escapes undecoded).
_ID_MEMBER = re.compile(rb'"_id"\s*:\s*"((?:[^"\\]|\\.)*)"')
_PLAIN_ID = re.compile(rb"[A-Za-z0-9_.:/+#@=,;()\[\]{}<>|~!?*&%$'^`-]*")
TREC_ID_HINT = "TREC run files separate columns by whitespace; replace the whitespace in the ids (e.g. with '_')"


def check_trec_id(path: str | Path, line_no: int | None, kind: str, identifier: str) -> None:
    """Refuse an id a TREC run or qrels line cannot hold (one containing whitespace).

    Raises:
        FormatError: Naming the file, the line and the id.
    """
    if len(identifier.split()) != 1 or identifier.strip() != identifier:
        raise FormatError(path, f"{kind} id {identifier!r} contains whitespace", line_no, TREC_ID_HINT)


def _scan_ids(path: Path, lines: bytes, first_line_index: int) -> None:
    """Check the ids of a run of whole JSONL lines; decode only ids that are not plain ASCII."""
    counted_to, line_no = 0, first_line_index + 1
    for match in _ID_MEMBER.finditer(lines):
        if _PLAIN_ID.fullmatch(match.group(1)):
            continue
        start = lines.rfind(b"\n", 0, match.start()) + 1
        end = lines.find(b"\n", match.end())
        line_no += lines.count(b"\n", counted_to, start)
        counted_to = start
        try:
            identifier = json.loads(lines[start : end if end >= 0 else len(lines)]).get("_id")
        except (ValueError, UnicodeDecodeError, AttributeError):
            continue  # not a record: the parser reports the line when it reaches it
        if isinstance(identifier, str):
            check_trec_id(path, line_no, "document", identifier)


def iter_lines(path: Path, digest: Any | None) -> Iterator[tuple[int, bytes]]:
    """Yield (line_no, line without its line ending), skipping blank lines."""
    with open_binary(path) as handle:
        try:
            for line_no, raw in enumerate(handle, start=1):
                if digest is not None:
                    digest.update(raw)
                line = raw.rstrip(b"\r\n")
                if line.strip():
                    yield line_no, line
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise FormatError(path, f"cannot read: {exc}", hint="the file is damaged or truncated") from exc


ErrorHandler = Callable[[FormatError], None]


def report_error(error: FormatError, on_error: ErrorHandler | None, cause: BaseException | None = None) -> None:
    """Raise `error`, or hand it to `on_error` (which collects it) so the reader skips the line."""
    if on_error is None:
        raise error from cause
    on_error(error)


def decode_line(path: Path, line_no: int, line: bytes) -> str:
    try:
        return line.decode("utf-8-sig" if line_no == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"not UTF-8: {exc}", line_no, "save the file as UTF-8") from exc
