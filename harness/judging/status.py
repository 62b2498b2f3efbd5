"""How much of a pool is judged: its pairs against the dataset's qrels and the judgments made on it.

A pool pair counts as judged when any source grades it: a qrels split of the dataset (every split, or the
one the pool was made against), whose annotators come from ``qrels/<split>.annotations.jsonl`` (a grade no
annotation explains counts as annotator ``qrels:<split>``, as `harness.judging.merge` counts it), the
judging page's exports lying in the pool folder (``judgments-POOLID-NAME.csv`` or ``.qrels``), and any
further judgments file given. An LLM's grades in the pool folder (``judgments-llm_MODEL.csv``, from
``beir-harness judge``) are pre-judgments: listed as not counted unless given. Before counting, the dataset's corpus and queries are checked against the
fingerprints in the pool's manifest: a pool made on other data is stale, and said so.
"""

from __future__ import annotations

import csv
import json
import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from harness.datasets.catalog import resolve_dataset
from harness.errors import DatasetError, FormatError
from harness.io.formats import content_sha256, find_file, iter_qrels, locate_corpus_and_queries
from harness.judging.merge import page_export_annotator, read_annotations, read_judgments

logger = logging.getLogger(__name__)

EXPORT_NAME = re.compile(r"^judgments-([0-9a-f]{16})-(.*)\.(csv|qrels)$")  # the judging page's download names
_LISTED = 10  # queries listed by name in the text summary


@dataclass
class PoolStatus:
    """A pool's progress: per query the pool's pairs and how many are judged, per annotator the pairs graded."""

    pool: Path
    pool_id: str
    pairs: dict[str, set[str]]  # query id → the pool's documents
    judged: dict[str, set[str]]  # query id → the pool's documents graded by any source
    annotators: dict[str, int]  # annotator → pool pairs graded
    sources: list[dict[str, Any]] = field(default_factory=list)  # each source: name, pairs graded, outside the pool
    stale: list[str] = field(default_factory=list)  # the dataset's files that changed since the pool was made
    not_counted: list[str] = field(default_factory=list)  # LLM pre-judgments in the pool folder, not given

    @property
    def n_pairs(self) -> int:
        """Pairs in the pool."""
        return sum(map(len, self.pairs.values()))

    @property
    def n_judged(self) -> int:
        """Pool pairs graded by at least one source."""
        return sum(map(len, self.judged.values()))

    def queries_by_state(self) -> dict[str, list[str]]:
        """The pool's query ids, grouped: ``full`` (every pair judged), ``partial``, ``none``."""
        groups: dict[str, list[str]] = {"full": [], "partial": [], "none": []}
        for query_id, docs in sorted(self.pairs.items()):
            done = len(self.judged.get(query_id, ()))
            groups["full" if done == len(docs) else "partial" if done else "none"].append(query_id)
        return groups

    def to_json(self) -> dict[str, Any]:
        """The status as a JSON object."""
        groups = self.queries_by_state()
        return {
            "pool": str(self.pool),
            "pool_id": self.pool_id,
            "pairs": self.n_pairs,
            "judged": self.n_judged,
            "queries": {state: len(ids) for state, ids in groups.items()},
            "per_query": {
                q: {"pairs": len(docs), "judged": len(self.judged.get(q, ()))} for q, docs in sorted(self.pairs.items())
            },
            "annotators": dict(sorted(self.annotators.items())),
            "sources": self.sources,
            "stale": self.stale,
            "not_counted": self.not_counted,
        }

    def format_text(self) -> str:
        """A few lines: pairs judged, queries fully/partly/not judged, per annotator, per source."""
        groups = self.queries_by_state()
        share = f" ({100 * self.n_judged / self.n_pairs:.1f}%)" if self.n_pairs else ""
        lines = [
            f"{self.pool}: {self.n_judged} of {self.n_pairs} pairs judged{share}; {len(self.pairs)} queries: "
            f"{len(groups['full'])} fully judged, {len(groups['partial'])} partly, {len(groups['none'])} "
            "not at all"
        ]
        for state, label in (("partial", "partly judged"), ("none", "not judged")):
            if groups[state]:
                shown = [f"{q} ({len(self.judged.get(q, ()))}/{len(self.pairs[q])})" for q in groups[state][:_LISTED]]
                more = f", ... and {len(groups[state]) - _LISTED} more" if len(groups[state]) > _LISTED else ""
                lines.append(f"  {label}: {', '.join(shown)}{more}")
        lines += [f"  annotator {name}: {count} pairs" for name, count in sorted(self.annotators.items())]
        lines += [
            f"  source {s['source']}: {s['pool_pairs']} pool pairs"
            + (f", {s['outside_pool']} outside the pool (not counted)" if s["outside_pool"] else "")
            for s in self.sources
        ]
        lines += [
            f"  not counted: {path} (LLM pre-judgments; give it with --judgments to count it)"
            for path in self.not_counted
        ]
        return "\n".join(lines)


def read_pool(pool: str | Path) -> tuple[dict, dict[str, set[str]]]:
    """A pool folder's manifest and its pairs (query id → documents, from ``pool.csv``).

    Raises:
        DatasetError: Not a pool folder (no ``manifest.json`` with a pool id, or no ``pool.csv``).
    """
    pool = Path(pool)
    hint = "give the folder that `beir-harness pool --out` wrote"
    manifest_path = pool / "manifest.json"
    if not manifest_path.is_file():
        raise DatasetError(f"{pool}: not a pool folder (no manifest.json); {hint}")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        missing = [
            key
            for key in ("pool_id", "dataset", "fingerprints")
            if not isinstance(manifest, dict) or key not in manifest
        ]
    except (OSError, ValueError, TypeError) as exc:
        raise FormatError(manifest_path, f"not a pool manifest ({exc})", hint=hint) from None
    if missing:
        raise FormatError(manifest_path, f"not a pool manifest (no {', '.join(missing)})", hint=hint)
    pairs: dict[str, set[str]] = {}
    try:
        with open(pool / "pool.csv", encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                pairs.setdefault(row["query_id"], set()).add(row["doc_id"])
    except (OSError, KeyError, csv.Error) as exc:
        raise DatasetError(f"{pool}: not a pool folder (its pool.csv cannot be read: {exc}); {hint}") from None
    return manifest, pairs


def stale_files(manifest: dict, root: Path) -> list[str]:
    """The dataset files (corpus, queries) whose content is not what the pool was made on."""
    folder = locate_corpus_and_queries(root)
    made_on = manifest["fingerprints"]
    return [
        name
        for name, path in (("corpus", folder.corpus), ("queries", folder.queries))
        if made_on.get(name) != content_sha256(path)
    ]


def qrels_votes(root: Path, split: str | None) -> list[tuple[str, str, str, str]]:
    """(source, query, document, annotator) of every grade in the dataset's qrels (one split, or all)."""
    qrels_dir = root / "qrels"
    if split is not None:
        files = [path for path in [find_file(qrels_dir / f"{split}.tsv")] if path]
    else:
        files = sorted(qrels_dir.glob("*.tsv*")) if qrels_dir.is_dir() else []
    found = []
    for path in files:
        name = path.name.split(".")[0]
        annotations, _ = read_annotations(root, name)
        by_pair: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        for j in annotations:
            by_pair[j.query_id, j.doc_id][j.annotator] = j.grade
        for _, query_id, doc_id, grade in iter_qrels(path):
            # Every annotator of the pair; a grade none of them gave is the qrels' own vote (as a merge counts it).
            voters = by_pair.get((query_id, doc_id), {})
            for annotator in [*voters] + ([f"qrels:{name}"] if grade not in voters.values() else []):
                found.append((f"qrels/{path.name}", query_id, doc_id, annotator))
    return found


def file_votes(path: Path, pool_id: str, pairs: dict[str, set[str]]) -> list[tuple[str, str, str, str]]:
    """(source, query, document, annotator) of a judgments file, refusing one made on another pool."""
    match = EXPORT_NAME.search(path.name)
    if match and match[1] != pool_id:
        raise DatasetError(
            f"{path}: exported from pool {match[1]}, not this pool ({pool_id}); judge this pool's "
            "judge.html, or give the file to the status of its own pool"
        )
    # A TREC file names no annotator: its file name does (judgments-POOLID-NAME.qrels; else the name's stem).
    name = page_export_annotator(path) or path.name.split(".")[0]
    votes = [(str(path), j.query_id, j.doc_id, j.annotator) for j in read_judgments(path, annotator=name)]
    if not any(d in pairs.get(q, ()) for _, q, d, _ in votes):
        raise DatasetError(
            f"{path}: none of its {len(votes)} judgments is a pair of this pool (is it the "
            "judgments of another pool?); give the judgments made on this pool's judge.html"
        )
    return votes


def pool_status(
    pool: str | Path, dataset: str | Path | None = None, judgments: Iterable[str | Path] = ()
) -> PoolStatus:
    """How much of the pool in `pool` is judged (see the module's docstring).

    Args:
        pool: A pool folder (`harness.judging.pool.build_pool`).
        dataset: The dataset the pool was made on; default: the one its manifest names.
        judgments: More judgments files (the judging page's CSV or TREC exports, or any `read_judgments` reads).

    Raises:
        DatasetError: Not a pool folder; a judgments file exported from, or made for, another pool; no dataset.
        FormatError: An unreadable judgments or qrels file.
    """
    pool = Path(pool)
    manifest, pairs = read_pool(pool)
    root, _ = resolve_dataset(dataset if dataset is not None else manifest["dataset"], download=False, progress=False)
    stale = stale_files(manifest, root)
    if stale:
        logger.warning(
            "%s: the dataset's %s changed since the pool was made (sha256 differs from the manifest's): "
            "its pairs may name documents or queries that are gone or changed; pool again",
            pool,
            " and ".join(stale),
        )
    files = [*sorted(p for p in pool.iterdir() if EXPORT_NAME.search(p.name)), *map(Path, judgments)]
    # `beir-harness judge` writes an LLM's grades beside the pool: pre-judgments, counted only when asked.
    given = {path.resolve() for path in files}
    not_counted = [str(p) for p in sorted(pool.glob("judgments-llm_*.csv")) if p.resolve() not in given]
    votes = qrels_votes(root, manifest.get("split"))
    for path in dict.fromkeys(files):
        votes += file_votes(path, manifest["pool_id"], pairs)
    judged: dict[str, set[str]] = defaultdict(set)
    by_annotator: dict[str, set[tuple[str, str]]] = defaultdict(set)
    by_source: dict[str, tuple[set, list[int]]] = {}
    for source, query_id, doc_id, annotator in votes:
        inside = doc_id in pairs.get(query_id, ())
        found, outside = by_source.setdefault(source, (set(), [0]))
        if inside:
            judged[query_id].add(doc_id)
            by_annotator[annotator].add((query_id, doc_id))
            found.add((query_id, doc_id))
        elif not source.startswith("qrels/"):  # qrels judge far more than a pool: only a file's strays count
            outside[0] += 1
    sources = [
        {"source": s, "pool_pairs": len(found), "outside_pool": outside[0]} for s, (found, outside) in by_source.items()
    ]
    return PoolStatus(
        pool,
        manifest["pool_id"],
        pairs,
        dict(judged),
        {a: len(p) for a, p in by_annotator.items()},
        sources,
        stale,
        not_counted,
    )
