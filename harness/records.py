"""Core records of beir-harness: documents, queries, judgments, runs and results.

These types know nothing about files (that is `harness.io.formats`) and nothing about models; the one exception is
`Result`, which reads its own JSON object back (`Result.from_json`: one file, no format machinery), and `model_slug`,
the folder name a result of a model is written under.
Identifiers are always called ``query_id`` and ``doc_id``; BEIR's on-disk spellings
(``_id``, ``query-id``, ``corpus-id``) never leave `harness.io.formats`.

Ranking rule (the tie rule): a run is ordered exactly as trec_eval orders it, by score
descending and, among equal scores, by ``doc_id`` descending in byte order (trec_eval's
``strcmp(b, a)``). Scores are compared as pytrec_eval compares them, rounded to float32 (1e-50 ties 0.0,
1.00000001 ties 1.0). The rank column of a TREC run file is ignored, as trec_eval ignores it.
Every metric in beir-harness, including MRR, reads this one order, and every cut of a ranking keeps its first
documents in it (`top_scores`, `Run.truncated`): a ranking cut at K is the first K of any deeper one.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from harness.errors import HarnessError


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
        The documents ranked by score descending, compared as float32 as pytrec_eval compares them, ties
        broken by doc_id descending; each keeps its score as given. Python compares str by code point, which
        for UTF-8 is the byte order strcmp uses.
    """
    items = list(scores.items() if isinstance(scores, Mapping) else scores)
    given = [float(score) for _, score in items]
    ranked = sorted(zip(array("f", given), (doc_id for doc_id, _ in items), given), reverse=True)
    return tuple(ScoredDoc(doc_id, score) for _, doc_id, score in ranked)


def top_scores(scores: Mapping[str, float], depth: int) -> dict[str, float]:
    """The first `depth` documents of `scores` in the ranking rule's order (`rank_scores`), as doc_id → score
    (the scores as given, a new dict): the one cut every ranking of beir-harness is cut with, so that a ranking
    cut at K is the first K of the deeper one, ties at the cut included, and the documents kept are those
    trec_eval counts in its top `depth`."""
    if len(scores) <= depth:
        return dict(scores)
    if depth <= 0:
        return {}
    top = heapq.nlargest(depth, zip(array("f", scores.values()), scores))  # ties: the greater doc_id first
    return {doc_id: scores[doc_id] for _, doc_id in top}


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


@dataclass(frozen=True)
class Exclusions:
    """The (query, document) pairs no ranking may hold: removed from every run before any cut, metric or pool.

    Two sources, one rule: a dataset's excluded pairs (``excluded/<split>.tsv``, `harness.io.exclusions`), and
    with `self_hits` each query's own id as a document (the self-hit policy of ArguAna and Quora).

    Attributes:
        pairs: query_id → the doc_ids excluded for it.
        self_hits: Also exclude the document whose doc_id equals the query_id.
    """

    pairs: Mapping[str, frozenset[str]] = field(default_factory=dict)
    self_hits: bool = False

    def of(self, query_id: str) -> frozenset[str]:
        """The doc_ids excluded for one query (empty when none)."""
        docs = self.pairs.get(query_id, frozenset())
        return docs | {query_id} if self.self_hits else docs

    @property
    def most(self) -> int:
        """The most documents any one query can lose: a first stage retrieves this many more than it keeps."""
        return max(map(len, self.pairs.values()), default=0) + int(self.self_hits)

    @property
    def n_pairs(self) -> int:
        """The excluded pairs listed (self-hits not counted)."""
        return sum(map(len, self.pairs.values()))

    def __bool__(self) -> bool:
        return self.self_hits or any(self.pairs.values())


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
        """A copy without any document whose doc_id equals its query_id (`Exclusions` with ``self_hits``)."""
        return self.without(Exclusions(self_hits=True))

    def without(self, exclusions: Exclusions) -> Run:
        """A copy without the (query, document) pairs `exclusions` names (the queries it names nothing for are
        the same dicts: nothing is copied for them)."""
        kept = {}
        for query_id, docs in self._scores.items():
            excluded = exclusions.of(query_id)
            kept[query_id] = {d: s for d, s in docs.items() if d not in excluded} if excluded else dict(docs)
        return Run.adopt(kept, self.name, self.metadata)

    def truncated(self, depth: int) -> Run:
        """A copy keeping the first `depth` documents of each ranked list (`top_scores`: scores compared as
        float32, as the metrics compare them, so the cut keeps what trec_eval's top `depth` holds)."""
        kept = {query_id: top_scores(docs, depth) for query_id, docs in self._scores.items()}
        return Run.adopt(kept, self.name, self.metadata)

    def to_dict(self) -> dict[str, dict[str, float]]:
        """query_id → {doc_id: score}, the shape pytrec_eval and BEIR take."""
        return {query_id: dict(docs) for query_id, docs in self._scores.items()}

    def __repr__(self) -> str:
        return f"Run({self.name!r}, {len(self)} queries)"


RESULT_SCHEMA_VERSION = 3  # 2: label, variant; config_hash from `harness.reporting.variant`; 3: cost
CONTENT_DIGEST = "content"  # the key of a result file's ``fingerprints`` that holds its own digest (`result_digest`)


def result_digest(data: Mapping[str, Any]) -> str:
    """sha256 of a result file's JSON object in canonical form, without the digest it records of itself.

    Canonical: keys sorted at every level, separators ``,`` and ``:`` with no spaces, ASCII escapes
    (``json.dumps(data, sort_keys=True, separators=(",", ":"))``), over everything in the object except
    ``fingerprints["content"]`` (`CONTENT_DIGEST`). Floats are written by ``repr``, which reads back to the same
    float, so the digest of a file as read equals the digest of the object written (`write_result` digests the
    object as a reader will parse it).
    """
    fingerprints = data.get("fingerprints")
    if isinstance(fingerprints, Mapping) and CONTENT_DIGEST in fingerprints:
        data = {**data, "fingerprints": {key: value for key, value in fingerprints.items() if key != CONTENT_DIGEST}}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Result:
    """Everything one evaluation produced and how it was produced.

    Attributes:
        dataset: Dataset name (the folder name for a folder path).
        split: The qrels split.
        model: Model name or local path, or ``run:<file>`` for an external run.
        metrics: canonical metric name → mean over every judged query.
        per_query: query_id → metric name → value.
        n_queries: Judged queries (the denominator of every mean).
        config: How the run was made: k values, depth, index, self-hit policy, batch size...
        fingerprints: sha256 of the uncompressed corpus, queries and qrels (and run) files; the
            written file also holds ``scored_run``, the sha256 of the run file beside it, and ``content``, the
            `result_digest` of the file itself (results written before content digests have none).
        timings: Seconds per phase: load, encode_corpus, encode_queries, index, search, score, and rerank,
            exact_search, latency_probe when they ran; encode (corpus + queries) and total (the wall time).
            Results written before cost records have load, encode, index, search, score, total.
        versions: Versions of python, beir-harness and the libraries that made the numbers.
        created: ISO-8601 UTC time the evaluation finished.
        notes: Warnings about the evaluation (e.g. judged queries missing from a run).
        index_quality: For an approximate index, the mean fraction of the exact top-k it found
            (``recall_of_exact@k``, measured against flat search on the same vectors and queries).
        config_hash: sha256 (16 hex digits) of the model, split and decisive settings that
            differ from the defaults (`harness.reporting.variant.Configuration`); `bench` skips a cell whose
            result has the same hash.
        host: The machine: CPU model, cores used, the SIMD flags that pick kernels, the GPU if
            one was used (`harness.host.host_info`).
        label: The name shown in tables and plots (``--name``, else model and variant tokens).
        variant: ``""`` for the default configuration, else the part of the file name that
            names the differing settings (e.g. ``hnsw-3f2a9c1d``).
        cost: What the run cost beyond `timings` (docs/outputs.md defines each field): the phases served from
            the cache, documents/s, queries/s, search latency p50/p95/p99 with its per-query sample, peak RSS,
            index and cache bytes, an endpoint's requests, tokens and price. Not part of `config_hash`;
            ``{}`` for results written before it existed.
    """

    dataset: str
    split: str
    model: str
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    config: dict[str, Any]
    fingerprints: dict[str, str]
    timings: dict[str, float]
    versions: dict[str, str]
    created: str
    notes: list[str] = field(default_factory=list)
    index_quality: dict[str, float] = field(default_factory=dict)
    config_hash: str = ""
    label: str = ""
    variant: str = ""
    host: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    path: Path | None = field(default=None, compare=False, repr=False)  # the file it was read from or written to
    # `result_digest` of the file as read, when it records a content digest ("" otherwise, and when never read).
    read_digest: str = field(default="", compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to the result file (without its content digest: `write_result` adds it), as a
        reader parses it (lists for tuples, string keys): a copy, through the C JSON encoder (no deep copy)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("path", "read_digest")}
        data["fingerprints"] = {key: value for key, value in self.fingerprints.items() if key != CONTENT_DIGEST}
        return json.loads(json.dumps({"schema_version": RESULT_SCHEMA_VERSION, **data}))

    @classmethod
    def from_json(cls, path: str | Path) -> Result:
        """Read a result file written by `write_result` (any schema version).

        A file written before labels existed gets its model as its label. A file that records a content digest
        is digested as read (`read_digest`), for `harness.reporting.report.result_problems` to compare.

        Raises:
            HarnessError: The file cannot be read, is not JSON, or is not a beir-harness result.
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise HarnessError(f"{path}: cannot read the result file ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise HarnessError(f"{path}: not a beir-harness result file (invalid JSON: {exc})") from None
        missing = [key for key in _REQUIRED if not isinstance(data, dict) or key not in data]
        if missing:
            raise HarnessError(f"{path}: not a beir-harness result file (no {', '.join(missing)})")
        known = {spec.name for spec in fields(cls)} - {"path", "read_digest"}
        values = {key: value for key, value in data.items() if key in known}
        values.setdefault("label", "")
        values["label"] = values["label"] or data["model"]
        for key in ("config", "fingerprints", "timings", "versions", "host", "cost"):
            values[key] = values.get(key) or {}
        values.setdefault("created", "")
        recorded = isinstance(data.get("fingerprints"), dict) and CONTENT_DIGEST in data["fingerprints"]
        return cls(**values, path=path, read_digest=result_digest(data) if recorded else "")

    def to_frame(self):
        """The per-query values as a pandas DataFrame (one row per judged query, one column per metric), with
        the result's dataset, split, label and model in ``attrs``: for notebooks."""
        import pandas as pd

        frame = pd.DataFrame.from_dict(self.per_query, orient="index")
        frame.index.name = "query_id"
        frame.attrs.update(dataset=self.dataset, split=self.split, label=self.label or self.model, model=self.model)
        return frame

    @property
    def run_path(self) -> Path:
        """The run file beside the result file it was read from or written to (`result_paths`' naming)."""
        if self.path is None:
            raise HarnessError(f"{self.where}: this result was never written, so it has no run file")
        return self.path.with_name(f"{self.path.stem}.run.trec")

    @property
    def where(self) -> str:
        """The file it was read from, for messages (its label when it was never written)."""
        return str(self.path) if self.path is not None else self.label or self.model


_REQUIRED = ("dataset", "split", "model", "metrics", "per_query", "n_queries")


def model_slug(model: str) -> str:
    """A folder name for a model: ``org/name`` → ``org__name`` (as MTEB's results do).

    A local path keeps only its last component; characters outside ``[A-Za-z0-9._-]`` become
    ``_``, so the slug can never leave the output folder.
    """
    if model.startswith(("/", "./", "../", "~")) or "\\" in model:
        model = Path(model.rstrip("/\\")).name or "model"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.replace("/", "__")).strip("._") or "model"
    return slug
