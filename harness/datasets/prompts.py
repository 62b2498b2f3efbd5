"""The prompts known models were published with, shipped as ``harness/data/model-prompts.csv``.

One row per dense model of the published-scores table: the text prepended to queries and to documents
(``query_prompt``, ``doc_prompt``; empty: nothing), the model's token capacity and whether it is scored on
normalized vectors (cosine) or raw dot products, and where the row comes from (``source``):

* ``mteb``: MTEB's own model metadata (`mteb.get_model_meta`: the loader's ``model_prompts``, ``max_tokens``,
  ``similarity_fn_name``), which is how MTEB's published numbers were encoded;
* ``paper``: the model's paper, for a model MTEB does not list.

An empty prompt adds nothing: a model whose own sentence-transformers configuration defines prompts keeps
using those, as MTEB does. The evaluation applies a row's prompts as if they were given as
``--query-prefix``/``--doc-prefix`` (same configuration hash), only when neither flag is given.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
from dataclasses import dataclass

from harness.errors import HarnessError

FILE = "harness/data/model-prompts.csv"
FIELDS = ("model", "query_prompt", "doc_prompt", "max_tokens", "normalize", "source", "note")
SOURCES = ("mteb", "paper")


@dataclass(frozen=True)
class ModelPrompts:
    """One model's row: its prompts, token capacity, similarity and where they come from."""

    model: str
    query_prompt: str
    doc_prompt: str
    max_tokens: int | None
    normalize: bool
    source: str
    note: str = ""

    @property
    def prompted(self) -> bool:
        """The row adds text to queries or documents."""
        return bool(self.query_prompt or self.doc_prompt)


def parse_prompts(text: str, where: str = FILE) -> dict[str, ModelPrompts]:
    """Read the registry's CSV `text` into model → row, refusing what the harness could not apply.

    Raises:
        HarnessError: Naming `where`, the line and the fix (unknown or missing column, empty model,
            repeated model, unknown source, a normalize that is not true/false, a bad max_tokens).
    """
    reader = csv.DictReader(text.splitlines())
    header = tuple(reader.fieldnames or ())
    unknown = [name for name in header if name not in FIELDS]
    missing = [name for name in FIELDS if name not in header]
    if unknown or missing:
        raise HarnessError(
            f"{where}:1: "
            + "; ".join(
                ([f"unknown column(s) {', '.join(unknown)}"] if unknown else [])
                + ([f"missing column(s) {', '.join(missing)}"] if missing else [])
            )
            + f"; the columns are {', '.join(FIELDS)}"
        )
    rows: dict[str, ModelPrompts] = {}
    for line, row in enumerate(reader, start=2):
        rows_row = _row(row, f"{where}:{line}")
        if rows_row.model in rows:
            raise HarnessError(f"{where}:{line}: model {rows_row.model} is listed twice; keep one row")
        rows[rows_row.model] = rows_row
    return rows


def _row(row: dict, where: str) -> ModelPrompts:
    if None in row:  # more cells than columns
        raise HarnessError(f"{where}: more cells than the {len(FIELDS)} columns; quote a prompt holding a comma")
    model = (row["model"] or "").strip()
    if not model:
        raise HarnessError(f"{where}: empty model name; name the model or delete the row")
    if row["source"] not in SOURCES:
        raise HarnessError(f"{where}: unknown source {row['source']!r}; use one of {', '.join(SOURCES)}")
    if row["normalize"] not in ("true", "false"):
        raise HarnessError(f"{where}: normalize must be true or false, got {row['normalize']!r}")
    tokens = row["max_tokens"] or ""
    if tokens and not (tokens.isdigit() and int(tokens) > 0):
        raise HarnessError(f"{where}: max_tokens must be a positive whole number or empty, got {tokens!r}")
    return ModelPrompts(
        model,
        row["query_prompt"] or "",
        row["doc_prompt"] or "",
        int(tokens) if tokens else None,
        row["normalize"] == "true",
        row["source"],
        row["note"] or "",
    )


@functools.lru_cache(maxsize=1)
def model_prompts() -> dict[str, ModelPrompts]:
    """Every row of the shipped registry, by model name."""
    text = importlib.resources.files("harness").joinpath("data/model-prompts.csv").read_text(encoding="utf-8")
    return parse_prompts(text)


def prompts_for(model: str) -> ModelPrompts | None:
    """The registry's row for `model` (a hub id, matched case-insensitively), or None."""
    rows = model_prompts()
    return rows.get(model) or next((row for name, row in rows.items() if name.lower() == model.lower()), None)
