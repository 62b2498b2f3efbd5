"""BM25, the lexical baseline, with `bm25s` (eager sparse-matrix scoring).

The variant is chosen to match pyserini's "BM25 flat" BEIR baseline (Lucene ``BM25Similarity``
with ``k1 = 0.9``, ``b = 0.4``, ``EnglishAnalyzer``), so that published numbers are comparable:

* fields: one field, ``title + " " + text`` (pyserini's "flat" index, not "multifield");
* analysis, as Lucene's ``EnglishAnalyzer``: split on runs of word characters (``\\w+``), drop a
  possessive ``'s``, lowercase, remove Lucene's 33 English stop words, Porter stemming (PyStemmer's
  ``porter``, the original Porter algorithm Lucene's ``PorterStemFilter`` implements);
* scoring: ``bm25s`` method ``lucene`` (Lucene's idf ``log(1 + (N - df + 0.5) / (df + 0.5))``, no
  (k1 + 1) factor in the numerator); documents matching no query term are not returned, as Lucene
  returns only matches.

Known differences from Lucene: Unicode word segmentation (Lucene's StandardTokenizer follows UAX#29,
``\\w+`` splits on apostrophes and hyphens alike) and Lucene's lossy document-length encoding (one
byte per length), which changes scores slightly.
"""

from __future__ import annotations

import logging
import re
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

from harness.errors import MissingDependencyError
from harness.records import Doc, Query, Run, doc_text, top_scores

logger = logging.getLogger(__name__)

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET.
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split()
)
_WORD = re.compile(r"\w+")
_POSSESSIVE = re.compile(r"'[sS]\b")


@dataclass(frozen=True)
class BM25Spec:
    """The BM25 variant; every field is recorded in the result's config."""

    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    stemmer: str = "porter"
    stopwords: str = "lucene-33"
    tokenizer: str = r"\w+, lowercased, possessive 's removed"
    fields: str = "title + ' ' + text"

    def to_config(self) -> dict[str, object]:
        return {"retriever": "bm25s", **asdict(self)}


class Analyzer:
    """Lucene-EnglishAnalyzer-like text analysis: words, lowercase, stop words, Porter stems."""

    def __init__(self, stemmer: str = "porter"):
        try:
            import Stemmer
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise MissingDependencyError("BM25 needs PyStemmer (pip install PyStemmer)") from exc
        self._stemmer = Stemmer.Stemmer(stemmer)

    def __call__(self, text: str) -> list[str]:
        words = _WORD.findall(_POSSESSIVE.sub("", text).lower())
        return self._stemmer.stemWords([word for word in words if word not in LUCENE_STOPWORDS])


class BM25Retriever:
    """BM25 over a streamed corpus (token lists are kept, texts are not)."""

    name = "bm25"

    def __init__(self, spec: BM25Spec = BM25Spec()):
        try:
            import bm25s
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise MissingDependencyError("BM25 needs bm25s (pip install bm25s)") from exc
        self.spec = spec
        self.analyzer = Analyzer(spec.stemmer)
        self._bm25 = bm25s.BM25(k1=spec.k1, b=spec.b, method=spec.method)
        self._doc_ids: list[str] = []

    def __len__(self) -> int:
        return len(self._doc_ids)

    def index(self, docs: Iterator[Doc], progress: bool = True) -> None:
        """Analyze and index every document of the stream."""
        from tqdm.auto import tqdm

        # Each document's terms are kept as 4-byte vocabulary ids (an array, not a list of str objects,
        # which bm25s then doubled with its own lists of int ids): peak memory 1.8 KB a document instead
        # of 4.0 KB (BENCHMARKS.md, "BM25 and learned-sparse indexing at scale"), what bounds the corpus one
        # machine can index. The scores are bm25s's own: it is given the same terms, numbered in first-seen
        # order, not its set's order.
        vocabulary: dict[str, int] = {}
        ids: list[array] = []
        for doc in tqdm(docs, desc="indexing BM25", unit="doc", disable=not progress, file=sys.stderr):
            self._doc_ids.append(doc.doc_id)
            ids.append(
                array("i", [vocabulary.setdefault(term, len(vocabulary)) for term in self.analyzer(doc_text(doc))])
            )
        if ids:
            self._bm25.index((ids, vocabulary), show_progress=False)

    def search(self, queries: Sequence[Query], depth: int) -> Run:
        """The `depth` best-scoring documents per query (only documents matching a query term), cut by the
        ranking rule (`harness.records.top_scores`): among documents tied at the cut, the greater doc_ids, so
        the run at any depth is the first `depth` of the complete ranking.

        bm25s is asked for one more document than kept; where that one ties the last kept (its heap keeps
        whichever tie it met), every document scoring at least the cut is ranked by the rule, from the query's
        full scores (the same float32 scores `retrieve` ranks).
        """
        import numpy as np

        depth = min(depth, len(self._doc_ids))
        results: dict[str, dict[str, float]] = {query.query_id: {} for query in queries}
        analyzed = [(query.query_id, self.analyzer(query.text)) for query in queries]
        searchable = [(query_id, tokens) for query_id, tokens in analyzed if tokens]
        if depth > 0 and searchable:
            k = min(depth + 1, len(self._doc_ids))
            rows, scores = self._bm25.retrieve([tokens for _, tokens in searchable], k=k, show_progress=False)
            doc_ids = self._doc_ids
            for (query_id, tokens), query_rows, query_scores in zip(searchable, rows.tolist(), scores.tolist()):
                hits = {doc_ids[row]: score for row, score in zip(query_rows, query_scores) if score > 0}
                if k > depth and 0 < query_scores[depth] == query_scores[depth - 1]:  # a tie across the cut
                    full = self._bm25.get_scores(tokens)
                    at_least = np.flatnonzero(full >= query_scores[depth - 1])
                    hits = {doc_ids[row]: score for row, score in zip(at_least.tolist(), full[at_least].tolist())}
                results[query_id] = top_scores(hits, depth)
        return Run.adopt(results, name=self.name)
