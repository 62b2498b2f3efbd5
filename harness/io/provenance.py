"""Where a split's grades came from: ``qrels/<split>.provenance.json`` beside the qrels.

`judgments merge` writes it (the annotators and how many grades each gave, the resolve policy and its tie
rule, the grade scale, Cohen's κ per annotator pair and Krippendorff's α, the merge's time); `evaluate`
copies it into every result scored on the split (``config.qrels_provenance``), and `report` shows it. A
split converted or downloaded without a merge has none: its results say nothing about it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.errors import FormatError
from harness.io.formats import atomic_writer
from harness.presentation import PlainText

SUFFIX = ".provenance.json"
_PLAIN_NAME = re.compile(r"[\w.:@+-]+")


def provenance_path(qrels_path: str | Path) -> Path:
    """``qrels/test.tsv`` (or ``test.tsv.gz``) → ``qrels/test.provenance.json``."""
    path = Path(qrels_path)
    stem = path.name.removesuffix(".gz").rsplit(".", 1)[0]
    return path.with_name(stem + SUFFIX)


def read_provenance(qrels_path: str | Path) -> dict[str, Any] | None:
    """The provenance recorded beside a qrels file, or None where no merge recorded one.

    Raises:
        FormatError: The file exists but is not a JSON object.
    """
    path = provenance_path(qrels_path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise FormatError(
            path,
            f"not JSON ({exc})",
            hint="this file is written by `judgments merge`; restore it from version control or merge again",
        ) from None
    if not isinstance(record, dict):
        raise FormatError(path, "not a JSON object", hint="this file is written by `judgments merge`")
    return record


def write_provenance(qrels_path: str | Path, record: Mapping[str, Any]) -> Path:
    """Write `record` beside `qrels_path`, atomically."""
    path = provenance_path(qrels_path)
    with atomic_writer(path) as handle:
        handle.write(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return path


def annotator_text(name: str) -> str:
    """An annotator's name in a list: as it is when it is a plain name (letters, digits, ``_ . : @ + -``: never
    ambiguous in ``alice 9, bob 7`` or ``alice/bob``), else as a JSON string (``"smith, j"``, ``"a b"``), which
    `json.loads` reads back exactly. The provenance file itself keeps every name as a JSON key."""
    return name if _PLAIN_NAME.fullmatch(name) else json.dumps(name, ensure_ascii=False)


def format_provenance(record: Mapping[str, Any]) -> str:
    """One line: ``qrels merged 2026-01-01T00:00:00+00:00 from 2 annotators (alice 9, bob 7) by majority,
    ties low, scale 0-3; κ alice/bob 0.588; α 0.606``; a name that is not plain is quoted (`annotator_text`)."""
    annotators = record.get("annotators") or {}
    who = ", ".join(f"{annotator_text(name)} {count}" for name, count in annotators.items())
    scale = record.get("scale") or ["?", "?"]
    kappas = "; ".join(
        f"κ {annotator_text(k['first'])}/{annotator_text(k['second'])} {_num(k.get('kappa'))}"
        for k in record.get("kappa", [])
    )
    return (
        f"qrels merged {record.get('merged_at', '?')} from {len(annotators)} annotators ({who}) by "
        f"{record.get('policy', '?')}, ties {record.get('ties', '?')}, scale {scale[0]}-{scale[1]}"
        + (f"; {kappas}" if kappas else "")
        + f"; α {_num(record.get('alpha'))}"
    )


def _num(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def qrels_notes(scored: Iterable[tuple[str, str, Mapping[str, Any] | None]]) -> list[str]:
    """One note per (dataset, split) whose results carry a qrels provenance: where their grades came from
    (and a warning where results of one split carry different merges)."""
    found: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for dataset, split, record in scored:
        if record:
            found.setdefault((dataset, split), {})[str(record.get("merged_at"))] = record
    notes = []
    for (dataset, split), records in found.items():
        latest = records[max(records)]
        notes.append(  # PlainText: the annotators' names show as typed in a Markdown report
            PlainText(
                f"{dataset} [{split}]: {format_provenance(latest)}"
                + (
                    f" (results here were scored on {len(records)} different merges of these qrels)"
                    if len(records) > 1
                    else ""
                )
            )
        )
    return notes
