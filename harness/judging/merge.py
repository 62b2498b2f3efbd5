"""Merge judgments (the judging page's CSV or TREC qrels export) into a split of a BEIR folder.

Who judged what is kept beside the qrels, in ``qrels/<split>.annotations.jsonl``: one line per (query,
document, annotator) with the grade, the file it came from, the time of the merge and the grade scale. The
qrels hold one grade per pair, resolved from every annotator's grade by the policy given: ``majority`` (the
most common grade; a tie goes to the lowest of the tied grades), ``mean`` (rounded, halves up), ``max``, or
``strict`` (refuse any disagreement). A grade already in the qrels that no annotation explains counts as the
vote of annotator ``qrels:<split>``, so a differing new grade is a conflict like any other: never a silent
change. The annotations file is replaced first and the qrels second, each atomically; a refused merge
writes neither, and one killed between the two renames leaves annotations that the rerun of the same merge
turns into the same qrels.
"""

from __future__ import annotations

import datetime
import gzip
import io
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from harness.datasets.convert import open_table, parse_grade
from harness.errors import DatasetError, FormatError, setting
from harness.io.formats import atomic_writer, find_file, iter_corpus, iter_queries, locate_corpus_and_queries, \
    read_qrels
from harness.judging.agreement import Agreement, agreement

POLICIES = ("majority", "mean", "max", "strict")
_TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
_COLUMNS = {"query": ("query_id", "query-id", "qid", "query"), "doc": ("doc_id", "corpus-id", "docid", "doc-id",
            "corpus_id", "doc"), "grade": ("grade", "score", "relevance", "rel"), "annotator": ("annotator",)}
_LISTED = 10  # problems listed under a refusal's first line; the rest are counted


@dataclass(frozen=True)
class Judgment:
    """One annotator's grade for one (query, document) pair, and where it was read."""

    query_id: str
    doc_id: str
    grade: int
    annotator: str
    source: str
    line: int | None = None
    time: str | None = None  # when it was merged (annotations read back from a folder)


def parse_scale(text: str) -> tuple[int, int]:
    """``"0-3"`` → (0, 3); ``"-1-2"`` → (-1, 2)."""
    match = re.fullmatch(r"\s*(-?\d+)\s*-\s*(-?\d+)\s*", text)
    if not match or int(match[1]) >= int(match[2]):
        raise ValueError(f"grade scale {text!r} is not LOW-HIGH with LOW < HIGH (e.g. 0-3)")
    return int(match[1]), int(match[2])


def _refusal(header: str, problems: list[str]) -> DatasetError:
    more = f"\n  ... and {len(problems) - _LISTED} more" if len(problems) > _LISTED else ""
    return DatasetError(header + "".join(f"\n  {p}" for p in problems[:_LISTED]) + more)


def _whitespace_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.name.endswith(".gz") else raw).decode("utf-8", errors="strict")
    for line_no, line in enumerate(io.StringIO(text), start=1):
        fields = line.split()
        if not fields or (line_no == 1 and not fields[-1].lstrip("-").replace(".", "", 1).isdigit()):
            continue  # blank, or a header row
        if len(fields) == 4:  # TREC: query_id iteration doc_id grade
            yield line_no, {"query": fields[0], "doc": fields[2], "grade": fields[3]}
        elif len(fields) in (3, 5):  # query_id doc_id grade [annotator] (the 5th is a TREC line + annotator)
            names = ("query", "doc", "grade") if len(fields) == 3 else ("query", "_", "doc", "grade", "annotator")
            yield line_no, dict(zip(names, fields))
        else:
            raise FormatError(path, f"expected 4 columns (TREC qrels 'query_id 0 doc_id grade'), found {len(fields)}",
                              line_no, "export TREC qrels or CSV query_id,doc_id,grade,annotator")


def _table_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    with open_table(path) as table:
        found = {role: next((c for c in table.columns if c.lower() in names), None) for role, names in _COLUMNS.items()}
        missing = [role for role in ("query", "doc", "grade") if found[role] is None]
        if missing:
            raise FormatError(path, f"no {' / '.join(missing)} column among {', '.join(table.columns)}",
                              hint="the header must be query_id,doc_id,grade[,annotator]")
        for position, record in table.rows:
            yield position, {role: record.get(column) for role, column in found.items() if column}


def read_judgments(path: str | Path, annotator: str | None = None) -> list[Judgment]:
    """The judgments of one file: CSV/TSV/JSONL with query_id, doc_id, grade[, annotator] columns, or
    whitespace-separated TREC qrels (``qid 0 docid grade``). Rows without an annotator take `annotator`.

    Raises:
        FormatError: Unreadable file, missing columns, a non-integer grade, or no annotator for a row.
    """
    path = Path(path)
    if not path.is_file():
        raise FormatError(path, "no such file")
    tabular = path.name.lower().removesuffix(".gz").endswith(_TABLE_SUFFIXES)
    rows = _table_rows(path) if tabular else _whitespace_rows(path)
    judgments = []
    for line, row in rows:
        query_id, doc_id = str(row.get("query") or "").strip(), str(row.get("doc") or "").strip()
        name = str(row.get("annotator") or "").strip() or annotator
        try:
            grade = parse_grade(row.get("grade"), allow_negative=True)
        except ValueError as exc:
            raise FormatError(path, str(exc), line, "grades are integers on the scale") from None
        if not query_id or not doc_id:
            raise FormatError(path, "empty query or document id", line)
        if not name:
            raise FormatError(path, "no annotator for this judgment", line,
                              f"add an annotator column or pass {setting('annotator')}")
        judgments.append(Judgment(query_id, doc_id, grade, name, str(path), line))
    if not judgments:
        raise FormatError(path, "no judgments")
    return judgments


def _check_same_annotator(judgments: Iterable[Judgment]) -> dict[tuple[str, str, str], Judgment]:
    """One grade per (query, document, annotator); a pair graded twice the same way is kept once."""
    seen: dict[tuple[str, str, str], Judgment] = {}
    problems = []
    for j in judgments:
        key = (j.query_id, j.doc_id, j.annotator)
        earlier = seen.setdefault(key, j)
        if earlier.grade != j.grade:
            problems.append(f"{j.annotator} graded ({j.query_id}, {j.doc_id}) {earlier.grade} at "
                            f"{_where(earlier)} and {j.grade} at {_where(j)}")
    if problems:
        raise _refusal(f"{len(problems)} pairs graded twice differently by the same annotator (keep one grade "
                       "per annotator and pair; nothing written):", problems)
    return seen


def _where(j: Judgment) -> str:
    return f"{j.source}:{j.line}" if j.line is not None else j.source


def _check_scale(judgments: Iterable[Judgment], scale: tuple[int, int]) -> None:
    outside = [f"{_where(j)}: grade {j.grade} for ({j.query_id}, {j.doc_id})" for j in judgments
               if not scale[0] <= j.grade <= scale[1]]
    if outside:
        raise _refusal(f"{len(outside)} grades outside the scale {scale[0]}-{scale[1]} (fix them or pass "
                       f"{setting('scale')}; nothing written):", outside)


def _check_known(judgments: list[Judgment], root: Path) -> None:
    """Every judged query and document exists in the folder; both kinds are listed in one refusal."""
    folder = locate_corpus_and_queries(root)
    queries = {q.query_id for q in iter_queries(folder.queries)}
    docs = {d.doc_id for d in iter_corpus(folder.corpus)}
    problems = [f"{_where(j)}: unknown query {j.query_id!r}" for j in judgments if j.query_id not in queries]
    problems += [f"{_where(j)}: unknown document {j.doc_id!r}" for j in judgments if j.doc_id not in docs]
    if problems:
        raise _refusal(f"{len(problems)} judgments name queries or documents not in {root} (check the ids, "
                       "or judge a pool of this folder; nothing written):", problems)


def annotations_path(root: str | Path, split: str) -> Path:
    """Where who-judged-what of a split is kept."""
    return Path(root) / "qrels" / f"{split}.annotations.jsonl"


def read_annotations(root: str | Path, split: str) -> tuple[list[Judgment], set[tuple[int, int]]]:
    """The annotations recorded for a split (empty when none were) and the grade scales they were merged on."""
    path = annotations_path(root, split)
    found, scales = [], set()
    if not path.is_file():
        return found, scales
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            r = json.loads(line)
            found.append(Judgment(r["query_id"], r["doc_id"], int(r["grade"]), r["annotator"], r["source"], None,
                                  r.get("time")))
            scales.add((int(r["scale"][0]), int(r["scale"][1])))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise FormatError(path, f"not an annotation record ({exc})", line_no,
                              "this file is written by `judgments merge`; restore it from version control") from None
    return found, scales


def resolve(grades: list[int], policy: str) -> int:
    """One grade from several annotators' grades, by `policy` (see the module's docstring)."""
    if policy == "max":
        return max(grades)
    if policy == "mean":
        return math.floor(sum(grades) / len(grades) + 0.5)
    counts = Counter(grades)
    top = max(counts.values())
    return min(g for g, c in counts.items() if c == top)  # majority (strict has no disagreement left to resolve)


@dataclass
class MergeReport:
    """What a merge did (or, refused, would have done)."""

    qrels_path: Path
    n_read: int  # judgments read from the files
    n_pairs: int  # pairs in the split after the merge
    added: int  # pairs that had no grade before
    changed: list[tuple[str, str, int, int]]  # (query, doc, old grade, new grade)
    conflicts: list[tuple[str, str, dict[str, int]]]  # pairs whose annotators disagree
    policy: str
    agreement: Agreement
    written: bool = field(default=False)

    def format_text(self) -> str:
        """A summary, the changed pairs and the agreement table."""
        lines = [f"merged {self.n_read} judgments into {self.qrels_path}: {self.n_pairs} pairs, {self.added} new, "
                 f"{len(self.changed)} changed, {len(self.conflicts)} with disagreeing annotators "
                 f"(resolved by {self.policy})"]
        lines += [f"  changed ({q}, {d}): {old} -> {new}" for q, d, old, new in self.changed[:_LISTED]]
        if len(self.changed) > _LISTED:
            lines.append(f"  ... and {len(self.changed) - _LISTED} more")
        return "\n".join(lines + [self.agreement.format_text()])


def _existing(root: Path, split: str, scale: tuple[int, int]) -> tuple[Path | None, dict[tuple[str, str], int],
                                                                        list[Judgment]]:
    """The split's qrels file (if any), its grades and its annotations, refusing a different grade scale."""
    qrels_path = find_file(root / "qrels" / f"{split}.tsv")
    grades = {(q, d): g for q, docs in read_qrels(qrels_path).items() for d, g in docs.items()} if qrels_path else {}
    annotations, scales = read_annotations(root, split)
    other = sorted(s for s in scales if s != scale)
    outside = sorted({g for g in grades.values() if not scale[0] <= g <= scale[1]})
    if other or outside:
        what = (f"was merged on the scale {other[0][0]}-{other[0][1]}" if other
                else f"holds grades {', '.join(map(str, outside))}")
        raise DatasetError(f"{qrels_path or annotations_path(root, split)}: split {split!r} {what}, not "
                           f"{scale[0]}-{scale[1]} (pass that {setting('scale')}, or merge into a new split; "
                           "nothing written)")
    return qrels_path, grades, annotations


def _votes(grades: dict[tuple[str, str], int], annotations: list[Judgment], new: dict[tuple[str, str, str], Judgment],
           split: str) -> dict[tuple[str, str], dict[str, int]]:
    """(query, doc) → annotator → grade, the qrels' own grade voting where no recorded annotation gave it."""
    votes: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for j in annotations:
        votes[j.query_id, j.doc_id][j.annotator] = j.grade
    for pair, grade in grades.items():
        if grade not in votes.get(pair, {}).values():  # judged before the annotations file, or edited by hand
            votes[pair][f"qrels:{split}"] = grade
    for j in new.values():
        votes[j.query_id, j.doc_id][j.annotator] = j.grade
    return votes


def merge_judgments(root: str | Path, files: Iterable[str | Path], split: str = "test", annotator: str | None = None,
                    policy: str = "majority", scale: tuple[int, int] = (0, 3), weights: str = "linear",
                    write: bool = True) -> MergeReport:
    """Add the judgments in `files` to `split` of the BEIR folder `root` (see the module's docstring).

    Raises:
        FormatError: An unreadable judgments file.
        DatasetError: Unknown queries/documents, grades off the scale, one annotator grading a pair two ways, a
            split on another scale, or (policy ``strict``) any disagreement; nothing is written.
    """
    root = Path(root)
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} ({', '.join(POLICIES)})")
    read = [j for path in files for j in read_judgments(path, annotator)]
    _check_scale(read, scale)
    _check_known(read, root)
    qrels_path, grades, annotations = _existing(root, split, scale)
    new = _check_same_annotator([*annotations, *read])
    recorded = {(j.query_id, j.doc_id, j.annotator) for j in annotations}
    fresh = {key: j for key, j in new.items() if key not in recorded}
    votes = _votes(grades, annotations, fresh, split)
    conflicts = [(q, d, dict(v)) for (q, d), v in sorted(votes.items()) if len(set(v.values())) > 1]
    if policy == "strict" and conflicts:
        raise _refusal(f"{len(conflicts)} pairs with disagreeing grades under the strict policy (resolve by "
                       "majority, mean or max, or settle them; nothing written):",
                       [f"({q}, {d}): " + ", ".join(f"{a}={g}" for a, g in sorted(v.items())) for q, d, v in conflicts])
    resolved = {pair: resolve(list(v.values()), policy) for pair, v in votes.items()}
    changed = [(q, d, grades[q, d], g) for (q, d), g in sorted(resolved.items()) if (q, d) in grades and
               grades[q, d] != g]
    target = qrels_path or root / "qrels" / f"{split}.tsv"
    report = MergeReport(target, len(read), len(resolved), sum(1 for p in resolved if p not in grades), changed,
                         conflicts, policy, agreement(votes, range(scale[0], scale[1] + 1), weights))
    if write:
        _write(root, split, target, resolved, [*annotations, *fresh.values()], scale)
        report.written = True
    return report


def _write(root: Path, split: str, target: Path, resolved: dict[tuple[str, str], int], annotations: list[Judgment],
           scale: tuple[int, int]) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with atomic_writer(annotations_path(root, split)) as handle:
        for j in annotations:
            handle.write(json.dumps({"query_id": j.query_id, "doc_id": j.doc_id, "annotator": j.annotator,
                                     "grade": j.grade, "source": j.source, "time": j.time or now,
                                     "scale": list(scale)}, ensure_ascii=False) + "\n")
    body = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for (q, d), g in sorted(resolved.items()))
    with atomic_writer(target, "wb") as handle:
        handle.write(gzip.compress(body.encode()) if target.name.endswith(".gz") else body.encode())


def judgment_votes(sources: Iterable[str | Path], split: str = "test", annotator: str | None = None,
                   scale: tuple[int, int] = (0, 3)) -> dict[tuple[str, str], dict[str, int]]:
    """(query, doc) → annotator → grade from BEIR folders' annotations and judgment files, checked as a merge
    checks them (scale, one grade per annotator and pair)."""
    read: list[Judgment] = []
    for source in map(Path, sources):
        if source.is_dir() and not annotations_path(source, split).is_file():
            raise DatasetError(f"{annotations_path(source, split)}: no annotations (merge judgments into "
                               f"this split first, or pick another with {setting('split')})")
        read += read_annotations(source, split)[0] if source.is_dir() else read_judgments(source, annotator)
    _check_scale(read, scale)
    votes: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for j in _check_same_annotator(read).values():
        votes[j.query_id, j.doc_id][j.annotator] = j.grade
    return votes
