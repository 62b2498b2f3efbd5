"""Long documents as passages: split each document into windows of the model's own tokens, score the passages,
and give each document one score (MaxP and its kin).

A model reads at most its maximum length (all-MiniLM-L6-v2: 256 tokens) and drops the rest of a longer document.
``--passages WINDOW[:STRIDE]`` splits the document's text into windows of WINDOW tokens of the model's own
tokenizer (special tokens not counted), each starting STRIDE tokens after the last (default: WINDOW, no overlap),
and scores each passage. The rules:

* a document whose text fits one window is one passage: its own text, ``(title + ' ' + text).strip()``, exactly
  what a run without passages encodes (its vector is shared with that run's cache);
* a passage never splits a word: a window ends before the last word that would not fit (and the next window starts
  at a word's first token), unless one word alone is longer than the window, which is then cut there (the next
  passage starting at the cut): no passage is ever longer than WINDOW tokens;
* the title is prepended to every passage, ``(title + ' ' + window).strip()``, as the MaxP papers do (Dai & Callan,
  SIGIR 2019; the segmented MS MARCO documents of Pyserini): a passage keeps what the document is about. The title
  is not counted in WINDOW: a model truncates a passage whose title, window and special tokens exceed its length.

The document's score (`document_scores`) is ``maxp`` its best passage's, ``firstp`` its first passage's, or ``sump``
the sum of its passages' (summed in float64, in passage order, then float32). The ranking is then cut by the one
rule every ranking of beir-harness is cut with (`harness.records.top_scores`): `DocumentTop` keeps, block by block,
every document whose score reaches the block's own cut (ties included), so the documents kept are exactly the top
of the whole corpus, never the documents of the top passages.
"""

from __future__ import annotations

import bisect
import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import HarnessError, setting
from harness.records import Doc, Run, doc_text

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

SCORES = ("maxp", "firstp", "sump")  # how a document's passage scores become its score
_HOW = "write WINDOW or WINDOW:STRIDE in tokens, e.g. 128 or 256:128"


@dataclass(frozen=True)
class PassageSpec:
    """How documents are split and scored.

    Attributes:
        window: Tokens of the model's tokenizer per passage (the title and special tokens not counted).
        stride: Tokens from one passage's start to the next's; None: `window` (no overlap).
        score: ``maxp``, ``firstp`` or ``sump`` (`document_scores`).
    """

    window: int
    stride: int | None = None
    score: str = "maxp"

    @property
    def step(self) -> int:
        """The stride in tokens (the window when none was given)."""
        return self.stride if self.stride is not None else self.window

    def check(self, max_length: int | None = None) -> None:
        """Refuse a window or stride that cannot work, and (given the model's `max_length`) a window the model
        cannot read whole.

        Raises:
            HarnessError: Naming the setting and the fix.
        """
        if self.window <= 0:
            raise HarnessError(f"{setting('passages')} window must be at least 1 token, got {self.window}; {_HOW}")
        if self.step <= 0:
            raise HarnessError(
                f"{setting('passages')} stride must be at least 1 token, got {self.step}; {_HOW} (no stride: "
                "no overlap)"
            )
        if self.step > self.window:
            raise HarnessError(
                f"{setting('passages')} stride {self.step} is longer than the window {self.window}: the text "
                f"between passages would never be read; use a stride of at most {self.window}"
            )
        if self.score not in SCORES:
            raise HarnessError(f"unknown {setting('passage_score')} {self.score!r}; use one of {', '.join(SCORES)}")
        if max_length is not None and self.window > max_length:
            raise HarnessError(
                f"{setting('passages')} window {self.window} is longer than the {max_length} tokens the model "
                f"reads; use a window of at most {max_length} (e.g. {setting('passages')} {min(128, max_length)})"
            )

    def to_config(self) -> dict[str, object]:
        """The settings a result's identity reads."""
        return {"window": self.window, "stride": self.step, "score": self.score}


def parse_passages(text: str, score: str = "maxp") -> PassageSpec:
    """``WINDOW`` or ``WINDOW:STRIDE`` (tokens) as a checked `PassageSpec` scored by `score`.

    Raises:
        HarnessError: Not integers, a window or stride below 1, a stride longer than the window, an unknown score.
    """
    window, colon, stride = str(text).strip().partition(":")
    parts = [window.strip(), stride.strip()] if colon else [window.strip()]
    if not all(part.isascii() and part.isdigit() for part in parts):
        raise HarnessError(f"{setting('passages')} {text!r} is not WINDOW[:STRIDE] in whole tokens; {_HOW}")
    spec = PassageSpec(int(parts[0]), int(parts[1]) if colon else None, score)
    spec.check()
    return spec


# --- the model's tokenizer and length, read from its folder (no weights loaded) -------------------------------------


@functools.lru_cache(maxsize=8)
def model_tokenizer(folder: str):
    """The fast tokenizer of the sentence-transformers model (bi-encoder or sparse encoder) in `folder` (or a hub
    id): its first module's, found through ``modules.json``.

    Raises:
        HarnessError: The model has no fast tokenizer (passages need its character offsets).
    """
    from transformers import AutoTokenizer

    path = Path(folder)
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
        path = path / modules[0].get("path", "")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    tokenizer = AutoTokenizer.from_pretrained(str(path) if path.exists() else folder)
    if not getattr(tokenizer, "is_fast", False):
        raise HarnessError(
            f"{setting('passages')} splits documents by the character offsets of the model's fast tokenizer; "
            f"{folder} has a slow one only"
        )
    return tokenizer


def model_max_length(folder: str, tokenizer, override: int | None = None) -> int | None:
    """The tokens the model reads: `override` (``max_seq_length``) when given, else its sentence-transformers
    configuration's ``max_seq_length``, else what sentence-transformers takes: the smaller of the tokenizer's
    ``model_max_length`` and the model's position embeddings. None when none of them is known."""
    if override is not None:
        return override
    path = Path(folder)
    try:
        declared = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8")).get("max_seq_length")
    except (OSError, ValueError, AttributeError):
        declared = None
    if declared:
        return int(declared)
    lengths = [getattr(tokenizer, "model_max_length", None)]
    try:
        lengths.append(json.loads((path / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings"))
    except (OSError, ValueError, AttributeError):
        pass
    known = [int(length) for length in lengths if isinstance(length, int) and 0 < length < 1_000_000]
    return min(known) if known else None


# --- splitting ------------------------------------------------------------------------------------------------------


def token_windows(word_starts: Sequence[bool], window: int, stride: int) -> list[tuple[int, int]]:
    """The [start, end) token ranges of the passages of a text of ``len(word_starts)`` tokens, where
    ``word_starts[i]`` says token i begins a word: each at most `window` tokens, ending before a word that would not
    fit, the next starting at the last word start at most `stride` tokens on (or, past a word longer than the
    stride, at the next word; a word longer than the window is cut there, and the next passage starts at the cut:
    no range is ever longer than `window`); the last reaches the end. One range for a text that fits one window."""
    n = len(word_starts)
    if n <= window:
        return [(0, n)]
    starts = [i for i, first in enumerate(word_starts) if first or i == 0]

    def snapped(start: int, limit: int, ahead: bool) -> int:
        """The last word start in (start, limit]; else (`ahead`) the next word start (the text's end past its
        last word), else `limit` (one word longer than the window: cut)."""
        at = bisect.bisect_right(starts, limit) - 1
        if starts[at] > start:
            return starts[at]
        if not ahead:
            return limit
        after = bisect.bisect_right(starts, start)
        return starts[after] if after < len(starts) else n

    spans, start = [], 0
    while True:
        if start + window >= n:
            spans.append((start, n))
            return spans
        end = snapped(start, start + window, False)
        spans.append((start, end))
        start = min(end, snapped(start, start + stride, True))  # a word longer than the stride: the next word


def split_documents(docs: Sequence[Doc], tokenizer, spec: PassageSpec) -> list[list[str]]:
    """The passages of each of `docs` (see the module's rules), tokenized in one batch."""
    texts = [doc.text for doc in docs]
    batch = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    passages = []
    for n, doc in enumerate(docs):
        word_ids = batch.word_ids(n)
        if len(word_ids) <= spec.window:
            passages.append([doc_text(doc)])
            continue
        offsets = batch["offset_mapping"][n]
        starts = [i == 0 or word_ids[i] != word_ids[i - 1] for i in range(len(word_ids))]
        passages.append(
            [
                (doc.title + " " + doc.text[offsets[start][0] : offsets[end - 1][1]]).strip()
                for start, end in token_windows(starts, spec.window, spec.step)
            ]
        )
    return passages


# --- scoring --------------------------------------------------------------------------------------------------------


def document_scores(scores: np.ndarray, starts: np.ndarray, how: str) -> np.ndarray:
    """Documents' scores from their passages' (the hook every passage-scoring system shares: dense, learned sparse,
    multi-vector).

    Args:
        scores: queries × passages, float32; each document's passages contiguous, in order.
        starts: The column of each document's first passage, ascending (a document has at least one passage).
        how: ``maxp`` (the best passage), ``firstp`` (the first), ``sump`` (the sum, in float64 in passage order).

    Returns:
        queries × documents, float32.
    """
    import numpy as np

    scores = np.asarray(scores, dtype=np.float32)
    starts = np.asarray(starts, dtype=np.int64)
    if how == "maxp":
        return np.maximum.reduceat(scores, starts, axis=1) if len(starts) else scores[:, :0]
    if how == "firstp":
        return scores[:, starts]
    if how != "sump":
        raise HarnessError(f"unknown {setting('passage_score')} {how!r}; use one of {', '.join(SCORES)}")
    counts = np.diff(np.append(starts, scores.shape[1]))
    total = scores[:, starts].astype(np.float64)
    for j in range(1, int(counts.max(initial=1))):
        more = np.flatnonzero(counts > j)  # the documents with a (j+1)-th passage
        total[:, more] += scores[:, starts[more] + j]
    return total.astype(np.float32)


class DocumentTop:
    """The top `depth` documents of each query, fed block by block (documents × queries), cut by the project's
    rule: each block keeps every document whose score reaches its own `depth`-th best (ties included), which every
    document of the overall top does; `run` then cuts what was kept (`harness.records.Run.truncated`).

    Args:
        query_ids: The queries, in the order of the score matrices' rows.
        depth: Documents kept per query.
        positive_only: Keep only documents scoring above 0 (a sparse model retrieves only those).
    """

    def __init__(self, query_ids: Sequence[str], depth: int, positive_only: bool = False):
        self.query_ids, self.depth, self.positive_only = list(query_ids), depth, positive_only
        self.kept: list[dict[str, float]] = [{} for _ in self.query_ids]

    def add(self, first_row: int, doc_ids: Sequence[str], scores: np.ndarray) -> None:
        """Scores of `doc_ids` (columns) for the queries from row `first_row` on (rows), float32."""
        import numpy as np

        scores = np.asarray(scores, dtype=np.float32)
        if not scores.size:
            return
        columns = scores.shape[1]
        cut = (
            np.partition(scores, columns - self.depth, axis=1)[:, columns - self.depth]
            if columns > self.depth
            else np.full(scores.shape[0], -np.inf, dtype=np.float32)
        )
        keep = scores >= cut[:, None]
        if self.positive_only:
            keep &= scores > 0
        rows, cols = np.nonzero(keep)
        values = scores[rows, cols].tolist()
        for row, col, value in zip(rows.tolist(), cols.tolist(), values):
            self.kept[first_row + row][doc_ids[col]] = value
        for row in set(rows.tolist()):
            kept = self.kept[first_row + row]
            if len(kept) > 4 * self.depth:  # bound what a query holds between blocks
                from harness.records import top_scores

                self.kept[first_row + row] = top_scores(kept, self.depth)

    def run(self, name: str = "run") -> Run:
        """The kept documents, cut to `depth` per query by the ranking rule."""
        return Run.adopt(dict(zip(self.query_ids, self.kept)), name=name).truncated(self.depth)


def search_passages(
    query_ids: Sequence[str],
    query_vectors: np.ndarray,
    passage_vectors: np.ndarray,
    doc_ids: Sequence[str],
    starts: np.ndarray,
    depth: int,
    how: str = "maxp",
    name: str = "run",
    block_entries: int = 32_000_000,
) -> Run:
    """Exact search of documents by their passages' vectors: inner products (float32) of every query with every
    passage, block by block of documents (about `block_entries` scores at once), aggregated per document
    (`document_scores`) and cut to `depth` (`DocumentTop`).

    Args:
        passage_vectors: passages × dimension, each document's passages contiguous, from ``starts[d]`` on.
        doc_ids: The documents, in the order of `starts`.
    """
    import numpy as np

    starts = np.asarray(starts, dtype=np.int64)
    ends = np.append(starts[1:], len(passage_vectors))
    top = DocumentTop(query_ids, depth)
    per_block = max(1, block_entries // max(1, len(query_ids)))  # passages per block
    first = 0
    while first < len(starts):
        last = int(np.searchsorted(ends, starts[first] + per_block, side="right"))
        last = max(last, first + 1)
        lo, hi = int(starts[first]), int(ends[last - 1])
        scores = query_vectors @ passage_vectors[lo:hi].T
        top.add(0, doc_ids[first:last], document_scores(scores, starts[first:last] - lo, how))
        first = last
    return top.run(name)
