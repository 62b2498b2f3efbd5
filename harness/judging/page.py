"""The judging page: one self-contained HTML file (no network: CSP ``default-src 'none'``) that shows one
query and one document at a time, blind, and keeps the judge's work in the browser.

The page holds the queries, the documents and the pairs in a seeded random order (queries shuffled, and the
documents of each query shuffled), never which system retrieved a document or at which rank. The data sits
in a ``<script type="application/json">`` block with ``<``, ``>`` and ``&`` escaped, so no text can end the
block, and the page's script puts every text on the page with ``textContent``: markup in a document is shown,
never run. The page asks who is judging before it takes a grade; grades autosave in ``localStorage`` under
the pool's id and the annotator's name, so two judges in one browser each have their own progress (switching
name resumes or starts that annotator's, never carries another's), and an export (CSV, TREC qrels) holds only
what that session's annotator typed, under their name: ``judgments-POOLID-NAME.csv``.

Documents whose title and text are identical are judged once per query (`same_text`): the page shows the
first of them, and its export gives that grade to each id, the copies marked in a ``same_text_as`` column
(which `judgments merge` records). The page shows "document k of n for this query".
"""

from __future__ import annotations

import random
import re
from importlib import resources
from typing import Any, Mapping, Sequence

from harness.presentation import embedded_json


def blind_order(pairs: Sequence[tuple[str, str]], seed: int) -> list[tuple[str, str]]:
    """`pairs` grouped by query, the queries and each query's documents in an order drawn from `seed` alone
    (so it follows neither rank nor system, and the same pool always gives the same order)."""
    by_query: dict[str, list[str]] = {}
    for query_id, doc_id in pairs:
        by_query.setdefault(query_id, []).append(doc_id)
    rng = random.Random(f"judge:{seed}")
    query_ids = sorted(by_query)
    rng.shuffle(query_ids)
    ordered = []
    for query_id in query_ids:
        doc_ids = sorted(by_query[query_id])
        rng.shuffle(doc_ids)
        ordered += [(query_id, doc_id) for doc_id in doc_ids]
    return ordered


def same_text(rows: Sequence[Mapping[str, str]]) -> dict[tuple[str, str], str]:
    """(query, document) → the document judged in its place, for each pooled document whose title and text
    are those of an earlier one of the same query (in the rows' order); documents without a twin are absent."""
    first: dict[tuple[str, str, str], str] = {}
    copies = {}
    for row in rows:
        shown = first.setdefault((row["query_id"], row.get("title") or "", row["text"]), row["doc_id"])
        if shown != row["doc_id"]:
            copies[row["query_id"], row["doc_id"]] = shown
    return copies


def page_data(manifest: Mapping[str, Any], rows: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """What the page embeds: the pool's id, scale, guidelines, texts and blind order (no system, no rank);
    a document with the text of another of its query is not shown but listed under it (`same_text`)."""
    copies = same_text(rows)
    grouped: dict[str, list[str]] = {}
    for (query_id, doc_id), shown in copies.items():
        grouped.setdefault(f"{query_id}\t{shown}", []).append(doc_id)
    items = blind_order(
        [(row["query_id"], row["doc_id"]) for row in rows if (row["query_id"], row["doc_id"]) not in copies],
        manifest["seed"],
    )
    counts = manifest["counts"]
    return {
        "pool_id": manifest["pool_id"],
        "title": f"Judging {manifest['dataset'].rstrip('/').split('/')[-1]}: {counts['pairs']} pairs, "
        f"{counts['queries_pooled']} queries",
        "scale": manifest["grade_scale"],
        "guidelines": manifest["guidelines"],
        "queries": {row["query_id"]: row["query"] for row in rows},
        "docs": {
            row["doc_id"]: [row["title"], row["text"]] for row in rows if (row["query_id"], row["doc_id"]) not in copies
        },
        "items": [list(item) for item in items],
        "copies": grouped,
    }


def render_judge_page(manifest: Mapping[str, Any], rows: Sequence[Mapping[str, str]]) -> str:
    """The judging page of a pool (`harness.judging.pool`): its manifest and its rows."""
    template = resources.files("harness").joinpath("data/judge-page.html").read_text(encoding="utf-8")
    data = page_data(manifest, rows)
    title = re.sub(r"[<>&\"']", "", data["title"])
    return template.replace("{{TITLE}}", title).replace("{{DATA}}", embedded_json(data))
