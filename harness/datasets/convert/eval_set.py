"""One eval-set file (JSON or YAML: ``documents`` and ``queries`` with their relevant ids) read, each entry
checked, and its documents, queries and judgments written."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from harness.datasets.convert.grades import scaled_grade
from harness.datasets.convert.options import ConvertOptions
from harness.datasets.convert.writer import Judgments, RecordWriter, extra_fields
from harness.errors import FormatError, setting


def load_eval_set(path: Path) -> dict[str, Any]:
    """The eval-set file's object, its ``documents`` and ``queries`` lists checked present and not empty.

    Raises:
        FormatError: Unreadable, not JSON/YAML, or not an object with both lists.
    """
    data = _load(path)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("documents"), list)
        or not isinstance(data.get("queries"), list)
    ):
        raise FormatError(path, "expected an object with lists 'documents' and 'queries'")
    if not data["documents"] or not data["queries"]:
        raise FormatError(path, "'documents' and 'queries' must not be empty")
    return data


def _load(path: Path) -> Any:
    name = path.name.lower()
    gz = name.endswith(".gz")
    name = name[:-3] if gz else name
    try:
        raw = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except (OSError, EOFError) as exc:
        raise FormatError(path, f"cannot read: {exc}") from None
    if name.endswith((".yaml", ".yml")):
        import yaml

        try:
            return yaml.safe_load(raw.decode("utf-8-sig"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise FormatError(path, f"invalid YAML: {' '.join(str(exc).split())}") from None
    if name.endswith(".json"):
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FormatError(path, f"invalid JSON: {exc}") from None
    raise FormatError(path, "unsupported eval-set file type", hint="use .json, .yaml or .yml, optionally .gz")


def _eval_set_id(path: Path, where: str, value: Any) -> str:
    if value is None or isinstance(value, (bool, dict, list)) or not str(value).strip():
        raise FormatError(path, f"{where}: missing or empty id")
    text = str(value).strip()
    if any(ch.isspace() for ch in text):
        raise FormatError(
            path, f"{where}: id {text!r} contains whitespace", hint="BEIR qrels and TREC run files cannot hold such ids"
        )
    return text


def _eval_set_text(path: Path, where: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise FormatError(path, f"{where}: text must be a string, got {type(value).__name__}")
    return value


def _error_at(path: Path, unit: str) -> Callable[..., FormatError]:
    """How a record writer names an entry of the file: ``document 3``, ``query 2``."""

    def error(reason: str, position: int, hint: str | None = None) -> FormatError:
        return FormatError(path, reason, position, hint, unit=unit)

    return error


def write_documents(path: Path, entries: list[Any], docs: RecordWriter, handle: IO[str]) -> None:
    """Each entry of ``documents`` (a string, or an object with an id, title and text) into the corpus file."""
    error = _error_at(path, "document")
    for index, entry in enumerate(entries):
        doc_id, title, text, metadata = _document(path, index, entry)
        if doc_id in docs.ids or doc_id in docs.dropped:
            raise FormatError(path, f"document {index + 1}: duplicate document id {doc_id!r}")
        docs.add(handle, doc_id, title, text, metadata, error, index + 1)


def _document(path: Path, index: int, entry: Any) -> tuple[str, str, str, dict[str, Any]]:
    where = f"document {index + 1}"
    if isinstance(entry, str):
        return str(index), "", entry, {}
    if not isinstance(entry, dict):
        raise FormatError(path, f"{where}: expected a string or an object, got {type(entry).__name__}")
    id_keys = [k for k in ("id", "_id", "doc_id") if k in entry]
    if len(id_keys) > 1:
        raise FormatError(path, f"{where}: both {id_keys[0]!r} and {id_keys[1]!r} given")
    doc_id = _eval_set_id(path, where, entry[id_keys[0]]) if id_keys else str(index)
    title = _eval_set_text(path, f"{where} title", entry.get("title"))
    text = _eval_set_text(path, f"{where} text", entry.get("text"))
    return doc_id, title, text, extra_fields(entry, {*id_keys, "title", "text"})


def write_queries(
    path: Path,
    entries: list[Any],
    queries: RecordWriter,
    handle: IO[str],
    judgments: Judgments,
    options: ConvertOptions,
) -> None:
    """Each entry of ``queries`` into the queries file, and its relevant documents into `judgments`."""
    error = _error_at(path, "query")
    for index, entry in enumerate(entries):
        where = f"query {index + 1}"
        if not isinstance(entry, dict):
            raise FormatError(path, f"{where}: expected an object with text and relevant")
        query_id = _eval_set_id(path, where, entry["id"]) if "id" in entry else f"q{index + 1}"
        if query_id in queries.ids or query_id in queries.dropped:
            raise FormatError(path, f"{where}: duplicate query id {query_id!r}")
        text = _eval_set_text(path, f"{where} text", entry.get("text"))
        for doc_id, grade in _relevant(path, where, entry.get("relevant"), options).items():
            judgments.add(query_id, doc_id, grade, index + 1)
        queries.add(handle, query_id, "", text, extra_fields(entry, {"id", "text", "relevant"}), error, index + 1)


def _relevant(path: Path, where: str, relevant: Any, options: ConvertOptions) -> dict[str, int]:
    """A query's ``relevant``: a list of ids (grade 1), an object id → grade, or nothing."""
    if relevant is None:
        return {}
    if isinstance(relevant, list):
        return {_eval_set_id(path, f"{where} relevant", d): 1 for d in relevant}
    if not isinstance(relevant, dict):
        raise FormatError(path, f"{where}: 'relevant' must be a list of ids or an object id → grade")
    grades = {}
    for doc_id, grade in relevant.items():
        key = _eval_set_id(path, f"{where} relevant", doc_id)
        try:
            given = grades[key] = scaled_grade(grade, options)
        except ValueError as exc:
            raise FormatError(path, f"{where}: relevant {doc_id!r}: {exc}") from None
        scale = options.grade_scale
        if scale and not scale[0] <= given <= scale[1]:
            raise FormatError(
                path,
                f"{where}: relevant {doc_id!r}: grade {given} is outside the scale {scale[0]}-{scale[1]}",
                hint=f"correct it, or widen {setting('grade_scale')}",
            )
    return grades
