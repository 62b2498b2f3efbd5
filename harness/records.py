"""Core records of beir-harness: documents, queries, judgments and runs.

These types know nothing about files (that is `harness.io.formats`) and nothing about models.
Identifiers are always called ``query_id`` and ``doc_id``; BEIR's on-disk spellings
(``_id``, ``query-id``, ``corpus-id``) never leave `harness.io.formats`.

Ranking rule (the tie rule): a run is ordered exactly as trec_eval orders it, by score
descending and, among equal scores, by ``doc_id`` descending in byte order (trec_eval's
``strcmp(b, a)``). The rank column of a TREC run file is ignored, as trec_eval ignores it.
Every metric in beir-harness, including MRR, reads this one order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import NamedTuple


class Doc(NamedTuple):
    """One corpus document."""

    doc_id: str
    title: str
    text: str


def doc_text(doc: Doc) -> str:
    """The text a document is encoded as: ``(title + " " + text).strip()``.

    This is BEIR's and MTEB's rule for dense models (``SentenceBERT.encode_corpus`` with
    ``sep=" "``), so an empty title gives the text alone.
    """
    return f"{doc.title} {doc.text}".strip()


class Query(NamedTuple):
    """One query."""

    query_id: str
    text: str


class ScoredDoc(NamedTuple):
    """One retrieved document with its score, as an entry of a ranked list."""

    doc_id: str
    score: float


def rank_scores(scores: Mapping[str, float] | Iterable[tuple[str, float]]) -> tuple[ScoredDoc, ...]:
    """Order documents the way trec_eval does.

    Args:
        scores: doc_id → score, or (doc_id, score) pairs with distinct doc_ids.

    Returns:
        The documents ranked by score descending, ties broken by doc_id descending.
        Python compares str by code point, which for UTF-8 is the byte order strcmp uses.
    """
    items = scores.items() if isinstance(scores, Mapping) else scores
    ranked = sorted(((float(score), doc_id) for doc_id, score in items), reverse=True)
    return tuple(ScoredDoc(doc_id, score) for score, doc_id in ranked)


class Qrels(Mapping[str, Mapping[str, int]]):
    """Read-only relevance judgments: query_id → {doc_id: relevance}.

    Relevance is an integer grade as written in the qrels file (BEIR uses 0, 1, 2, and
    TREC-COVID has a few -1). A document is *relevant* when its grade is ≥ 1; a grade of 0
    is a judged non-relevant document. Every query that appears here is a judged query.
    """

    __slots__ = ("_data",)

    def __init__(self, judgments: Mapping[str, Mapping[str, int]]):
        self._data = MappingProxyType({query_id: MappingProxyType(dict(docs)) for query_id, docs in judgments.items()})

    def __getitem__(self, query_id: str) -> Mapping[str, int]:
        return self._data[query_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    @property
    def n_judgments(self) -> int:
        """Number of (query, document) judgments."""
        return sum(len(docs) for docs in self._data.values())

    def doc_ids(self) -> set[str]:
        """All judged doc_ids."""
        return {doc_id for docs in self._data.values() for doc_id in docs}

    def relevant(self, query_id: str) -> set[str]:
        """The doc_ids judged relevant (grade ≥ 1) for one query; empty for an unknown query."""
        return {doc_id for doc_id, grade in self._data.get(query_id, {}).items() if grade >= 1}

    def to_dict(self) -> dict[str, dict[str, int]]:
        """A plain, mutable copy (what pytrec_eval and BEIR take)."""
        return {query_id: dict(docs) for query_id, docs in self._data.items()}

    def __repr__(self) -> str:
        return f"Qrels({len(self)} queries, {self.n_judgments} judgments)"


class Run(Mapping[str, tuple[ScoredDoc, ...]]):
    """A retrieval run: query_id → documents ranked by the trec_eval rule.

    The run keeps each query's scores as given and ranks a query's documents only when its
    ranked list is first asked for (then caches it): scoring with trec_eval needs the scores,
    not the order, so large runs are never sorted needlessly. A run may hold queries that are
    not judged (evaluation ignores them) and may lack judged ones (they score 0).

    Attributes:
        name: The run's tag (the last column of a TREC run file).
        metadata: Free-form, JSON-serialisable facts about how the run was made.
    """

    __slots__ = ("_scores", "_ranked", "_name", "_metadata")

    def __init__(
        self, scores: Mapping[str, Mapping[str, float]], name: str = "run", metadata: Mapping[str, object] | None = None
    ):
        # Plain dicts inside (pytrec_eval takes nothing else); read-only views outside.
        self._setup({query_id: dict(docs) for query_id, docs in scores.items()}, name, metadata)

    def _setup(self, scores: dict[str, dict[str, float]], name: str, metadata: Mapping[str, object] | None) -> None:
        self._scores = scores
        self._ranked: dict[str, tuple[ScoredDoc, ...]] = {}
        self._name = name
        self._metadata = MappingProxyType(dict(metadata or {}))

    @property
    def name(self) -> str:
        return self._name

    @property
    def metadata(self) -> Mapping[str, object]:
        return self._metadata

    @classmethod
    def from_scores(
        cls,
        scores: Mapping[str, Mapping[str, float] | Iterable[tuple[str, float]]],
        name: str = "run",
        metadata: Mapping[str, object] | None = None,
    ) -> Run:
        """A run from query_id → {doc_id: score} (or (doc_id, score) pairs with distinct doc_ids)."""
        plain = {}
        for query_id, docs in scores.items():
            if isinstance(docs, Mapping):
                plain[query_id] = dict(zip(docs, map(float, docs.values())))  # C-level loops: 1M pairs in ~0.1 s
            else:
                plain[query_id] = {doc_id: float(score) for doc_id, score in docs}
        run = cls.__new__(cls)
        run._setup(plain, name, metadata)  # already a private copy: no second copy
        return run

    @classmethod
    def adopt(
        cls, scores: dict[str, dict[str, float]], name: str = "run", metadata: Mapping[str, object] | None = None
    ) -> Run:
        """A run that takes ownership of `scores` instead of copying it.

        For producers that build the dicts themselves (index search, BM25): copying 1M scores costs as
        much as a third of trec_eval's own time. The caller hands the dicts over and must not modify
        them afterwards; values must already be Python floats.
        """
        run = cls.__new__(cls)
        run._setup(scores, name, metadata)
        return run

    @property
    def scores(self) -> Mapping[str, Mapping[str, float]]:
        """query_id → {doc_id: score}, read-only, unordered."""
        return MappingProxyType({query_id: MappingProxyType(docs) for query_id, docs in self._scores.items()})

    def renamed(self, name: str) -> Run:
        """The same run under another name (the tag its TREC file carries)."""
        return Run.adopt(self._scores, name, self.metadata)

    def scores_of(self, query_id: str) -> Mapping[str, float]:
        """One query's doc_id → score, read-only, unordered (cheap: no ranking, no copy)."""
        return MappingProxyType(self._scores[query_id])

    def depth(self, query_id: str) -> int:
        """How many documents the run holds for one query (0 for a query it lacks)."""
        return len(self._scores.get(query_id, ()))

    def trec_eval_input(self, query_ids: Iterable[str]) -> dict[str, dict[str, float]]:
        """The run's own score dicts for these queries, for pytrec_eval (which only reads them)."""
        return {query_id: self._scores[query_id] for query_id in query_ids if query_id in self._scores}

    def __getitem__(self, query_id: str) -> tuple[ScoredDoc, ...]:
        ranked = self._ranked.get(query_id)
        if ranked is None:
            ranked = self._ranked[query_id] = rank_scores(self._scores[query_id])
        return ranked

    def __iter__(self) -> Iterator[str]:
        return iter(self._scores)

    def __len__(self) -> int:
        return len(self._scores)

    def __contains__(self, query_id: object) -> bool:
        return query_id in self._scores

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Run):
            return NotImplemented
        return (self.name, dict(self.metadata), self.to_dict()) == (other.name, dict(other.metadata), other.to_dict())

    __hash__ = None  # type: ignore[assignment]

    def without_self_hits(self) -> Run:
        """A copy without any document whose doc_id equals its query_id."""
        kept = {query_id: {d: s for d, s in docs.items() if d != query_id} for query_id, docs in self._scores.items()}
        return Run(kept, self.name, self.metadata)

    def truncated(self, depth: int) -> Run:
        """A copy keeping the first `depth` documents of each ranked list."""
        kept = {}
        for query_id, docs in self._scores.items():
            if len(docs) <= depth:
                kept[query_id] = dict(docs)  # nothing to cut: no ranking needed
            else:
                # The trec_eval order (score, then doc_id, descending) of the top `depth` only.
                top = heapq.nlargest(depth, zip(docs.values(), docs))
                kept[query_id] = {doc_id: score for score, doc_id in top}
        return Run.adopt(kept, self.name, self.metadata)

    def to_dict(self) -> dict[str, dict[str, float]]:
        """query_id → {doc_id: score}, the shape pytrec_eval and BEIR take."""
        return {query_id: dict(docs) for query_id, docs in self._scores.items()}

    def __repr__(self) -> str:
        return f"Run({self.name!r}, {len(self)} queries)"
