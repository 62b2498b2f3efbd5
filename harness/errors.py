"""Typed errors of beir-harness.

Every error a user can cause (bad files, unknown models, bad options) is a `HarnessError`.
Its message is one line that says what went wrong, where, and what to do; the CLI prints it
and exits non-zero. Any other exception is a bug in beir-harness.
"""

from __future__ import annotations

from pathlib import Path


class HarnessError(Exception):
    """Base class of every error beir-harness reports to its user."""


def setting(name: str) -> str:
    """A setting's name inside an error message: ```top_k``` for the Python API, which the command line
    shows as its option (``--top-k``); library errors name settings, never CLI flags."""
    return f"`{name}`"


class FormatError(HarnessError):
    """A file does not follow the format it must have.

    Args:
        path: The offending file.
        reason: What is wrong, e.g. ``"invalid JSON: Expecting value"``.
        line_no: 1-based line number (or item/row number, see `unit`) of the problem.
        hint: What the user can do about it.
        unit: ``"line"`` gives ``path:N``; another unit (``"item"``, ``"row"``) gives ``path (item N)``.
    """

    def __init__(
        self, path: str | Path, reason: str, line_no: int | None = None, hint: str | None = None, unit: str = "line"
    ):
        self.path = str(path)
        self.reason = reason
        self.line_no = line_no
        self.hint = hint
        self.unit = unit
        if line_no is None:
            where = self.path
        elif unit == "line":
            where = f"{self.path}:{line_no}"
        else:
            where = f"{self.path} ({unit} {line_no})"
        message = f"{where}: {reason}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class DatasetError(HarnessError):
    """A dataset folder is missing, incomplete or inconsistent."""


class DownloadError(HarnessError):
    """A download failed (network, HTTP status, wrong content)."""


class ChecksumMismatchError(DownloadError):
    """Downloaded or imported bytes do not have the expected md5."""


class UnsafeArchiveError(DatasetError):
    """An archive holds members that would escape the target folder or unpack to far too much."""


class ModelLoadError(HarnessError):
    """A model could not be loaded."""


class UnknownMetricError(HarnessError):
    """A metric name that beir-harness does not know."""


class MissingDependencyError(HarnessError):
    """An optional library is not installed."""


class OutputError(HarnessError):
    """A result could not be written."""


class DataMismatchError(HarnessError):
    """Results of one dataset name were computed on different data (their corpus, queries or qrels differ)."""
