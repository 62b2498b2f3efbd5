"""Merge judgments (the judging page's CSV or TREC qrels export) into a split of a BEIR folder.

Who judged what is kept beside the qrels, in ``qrels/<split>.annotations.jsonl``: one line per (query,
document, annotator) with the grade, the file it came from, the time of the merge and the grade scale. The
qrels hold one grade per pair, resolved from every annotator's grade by the policy given: ``majority`` (the
most common grade), ``mean`` (the mean, rounded), ``max``, or ``strict`` (refuse any disagreement). Where
the policy cannot decide (majority: two grades equally common; mean: exactly halfway between two grades)
the tie rule decides: ``low`` (the default: the lower grade), ``high``, or ``refuse`` (list the pairs,
write nothing). With two annotators every disagreement is such a tie, so the rule alone settles them.

A grade already in the qrels that no annotation explains (judged before the annotations file, or edited by
hand) counts as the vote of annotator ``qrels:<split>``, and is recorded as such in the annotations, so a
differing new grade is a conflict like any other, never a silent change, and every vote that took part in a
merge stays on record: the qrels can be rebuilt from the annotations alone. A hand edit of a pair whose
``qrels:<split>`` vote is already recorded replaces that vote; the replaced record stays in the file, marked
``"superseded"``. Beside them, ``qrels/<split>.provenance.json`` says how the qrels were made
(`harness.io.provenance`). The annotations are replaced first, the provenance second, the qrels last, each
atomically; a refused merge writes none, and one killed between the renames leaves annotations that the
rerun of the same merge turns into the same qrels.
"""

from __future__ import annotations

import datetime
import gzip
import io
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from harness.datasets.convert.grades import parse_grade, scale_bounds
from harness.datasets.convert.tables import open_table
from harness.errors import DatasetError, FormatError, setting
from harness.io.formats import (
    atomic_writer,
    find_file,
    iter_corpus,
    iter_queries,
    locate_corpus_and_queries,
    read_qrels,
)
from harness.io.ids import normalisation_hint
from harness.io.provenance import annotator_text, read_provenance, write_provenance
from harness.judging.agreement import Agreement, agreement

POLICIES = ("majority", "mean", "max", "strict")
TIES = ("low", "high", "refuse")
_TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
_COLUMNS = {
    "query": ("query_id", "query-id", "qid", "query"),
    "doc": ("doc_id", "corpus-id", "docid", "doc-id", "corpus_id", "doc"),
    "grade": ("grade", "score", "relevance", "rel"),
    "annotator": ("annotator",),
    "twin": ("same_text_as",),
}
_LISTED = 10  # problems listed under a refusal's first line; the rest are counted
_PAGE_EXPORT = re.compile(r"^judgments-[0-9a-f]{16}-(.+?)(?: \(\d+\))?\.(?:csv|qrels)$")  # a browser may add " (1)"


def export_name(name: str) -> str:
    """An annotator's name as the judging page writes it in an export's file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def page_export_annotator(path: str | Path) -> str | None:
    """The annotator a judging-page export was made by, from its file name (``judgments-POOLID-NAME.csv``)."""
    match = _PAGE_EXPORT.match(Path(path).name)
    return match[1] if match else None


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
    same_text_as: str | None = None  # judged as this document of the same text (the judging page's copies)


def parse_scale(text: str) -> tuple[int, int]:
    """``"0-3"`` → (0, 3); ``"-1-2"`` → (-1, 2): `harness.datasets.convert.grades.scale_bounds` for the merge's
    ``scale``.

    Raises:
        ValueError: Not LOW-HIGH with LOW < HIGH.
    """
    try:
        return scale_bounds(text)
    except ValueError:
        raise ValueError(f"grade scale {text!r} is not LOW-HIGH with LOW < HIGH (e.g. 0-3)") from None


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
            raise FormatError(
                path,
                f"expected 4 columns (TREC qrels 'query_id 0 doc_id grade'), found {len(fields)}",
                line_no,
                "export TREC qrels or CSV query_id,doc_id,grade,annotator",
            )


def _table_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    with open_table(path) as table:
        found = {role: next((c for c in table.columns if c.lower() in names), None) for role, names in _COLUMNS.items()}
        missing = [role for role in ("query", "doc", "grade") if found[role] is None]
        if missing:
            raise FormatError(
                path,
                f"no {' / '.join(missing)} column among {', '.join(table.columns)}",
                hint="the header must be query_id,doc_id,grade[,annotator]",
            )
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
    session = page_export_annotator(path)  # the judging page names its export after its session's annotator
    judgments = []
    for line, row in rows:
        query_id, doc_id = str(row.get("query") or "").strip(), str(row.get("doc") or "").strip()
        name = str(row.get("annotator") or "").strip() or annotator or session
        if session is not None and name and export_name(name) != session:
            raise FormatError(
                path,
                f"annotator {name!r}, but the judging page exported this file from the "
                f"session of {session!r} (its name)",
                line,
                "merge the file the page exported for that annotator as it was saved; an export "
                "holds only the grades of the name typed in the page",
            )
        try:
            grade = parse_grade(row.get("grade"), allow_negative=True)
        except ValueError as exc:
            raise FormatError(path, str(exc), line, "grades are integers on the scale") from None
        if not query_id or not doc_id:
            raise FormatError(path, "empty query or document id", line)
        if not name:
            raise FormatError(
                path, "no annotator for this judgment", line, f"add an annotator column or pass {setting('annotator')}"
            )
        twin = str(row.get("twin") or "").strip() or None
        judgments.append(Judgment(query_id, doc_id, grade, name, str(path), line, same_text_as=twin))
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
            problems.append(
                f"{j.annotator} graded ({j.query_id}, {j.doc_id}) {earlier.grade} at "
                f"{_where(earlier)} and {j.grade} at {_where(j)}"
            )
    if problems:
        raise _refusal(
            f"{len(problems)} pairs graded twice differently by the same annotator (keep one grade "
            "per annotator and pair; nothing written):",
            problems,
        )
    return seen


def _where(j: Judgment) -> str:
    return f"{j.source}:{j.line}" if j.line is not None else j.source


def _check_scale(judgments: Iterable[Judgment], scale: tuple[int, int]) -> None:
    outside = [
        f"{_where(j)}: grade {j.grade} for ({j.query_id}, {j.doc_id})"
        for j in judgments
        if not scale[0] <= j.grade <= scale[1]
    ]
    if outside:
        raise _refusal(
            f"{len(outside)} grades outside the scale {scale[0]}-{scale[1]} (fix them or pass "
            f"{setting('scale')}; nothing written):",
            outside,
        )


def _check_known(judgments: list[Judgment], root: Path) -> None:
    """Every judged query and document exists in the folder; both kinds are listed in one refusal."""
    folder = locate_corpus_and_queries(root)
    queries = {q.query_id for q in iter_queries(folder.queries)}
    docs = {d.doc_id for d in iter_corpus(folder.corpus)}
    problems = [
        f"{_where(j)}: unknown {what} {value!r}"
        + (f" ({hint})" if (hint := normalisation_hint(value, known, where)) else "")
        for what, known, where, field in (
            ("query", queries, "the queries", "query_id"),
            ("document", docs, "the corpus", "doc_id"),
        )
        for j in judgments
        if (value := getattr(j, field)) not in known
    ]
    if problems:
        raise _refusal(
            f"{len(problems)} judgments name queries or documents not in {root} (check the ids, "
            "or judge a pool of this folder; nothing written):",
            problems,
        )


def annotations_path(root: str | Path, split: str) -> Path:
    """Where who-judged-what of a split is kept."""
    return Path(root) / "qrels" / f"{split}.annotations.jsonl"


def read_annotations(root: str | Path, split: str) -> tuple[list[Judgment], set[tuple[int, int]]]:
    """The annotations recorded for a split (empty when none were; superseded ones left out) and the grade
    scales they were merged on."""
    found, scales, _ = _read_records(root, split)
    return found, scales


def _read_records(root: str | Path, split: str) -> tuple[list[Judgment], set[tuple[int, int]], list[dict]]:
    path = annotations_path(root, split)
    found, scales, superseded = [], set(), []
    if not path.is_file():
        return found, scales, superseded
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            r = json.loads(line)
            judgment = Judgment(
                r["query_id"],
                r["doc_id"],
                int(r["grade"]),
                r["annotator"],
                r["source"],
                None,
                r.get("time"),
                r.get("same_text_as"),
            )
            (superseded.append(r) if r.get("superseded") else found.append(judgment))
            scales.add((int(r["scale"][0]), int(r["scale"][1])))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise FormatError(
                path,
                f"not an annotation record ({exc})",
                line_no,
                "this file is written by `judgments merge`; restore it from version control",
            ) from None
    return found, scales, superseded


def resolve(grades: list[int], policy: str, ties: str = "low") -> int | None:
    """One grade from several annotators' grades, by `policy` and, where it cannot decide, `ties` (see the
    module's docstring); None where `ties` is ``refuse`` and the policy cannot decide."""
    if policy == "max":
        return max(grades)
    if policy == "mean":
        low, rest = divmod(sum(grades), len(grades))  # exact: the mean is low + rest / n
        if 2 * rest != len(grades):
            return low + (2 * rest > len(grades))
        tied = [low, low + 1]
    else:  # majority (strict has no disagreement left to resolve)
        counts = Counter(grades)
        top = max(counts.values())
        tied = sorted(g for g, c in counts.items() if c == top)
        if len(tied) == 1:
            return tied[0]
    return None if ties == "refuse" else tied[0] if ties == "low" else tied[-1]


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
    ties: str = "low"
    n_ties: int = 0  # disagreements the policy could not decide, settled by the tie rule
    provenance: dict = field(default_factory=dict)  # what qrels/SPLIT.provenance.json holds (or would)

    def format_text(self) -> str:
        """A summary, the changed pairs and the agreement table."""
        lines = [
            f"merged {self.n_read} judgments into {self.qrels_path}: {self.n_pairs} pairs, {self.added} new, "
            f"{len(self.changed)} changed, {len(self.conflicts)} with disagreeing annotators "
            f"(resolved by {self.policy}, ties {self.ties}: {self.n_ties} settled by the tie rule)"
        ]
        lines += [f"  changed ({q}, {d}): {old} -> {new}" for q, d, old, new in self.changed[:_LISTED]]
        if len(self.changed) > _LISTED:
            lines.append(f"  ... and {len(self.changed) - _LISTED} more")
        return "\n".join(lines + [self.agreement.format_text()])


def _existing(
    root: Path, split: str, scale: tuple[int, int]
) -> tuple[Path | None, dict[tuple[str, str], int], list[Judgment], list[dict], dict]:
    """The split's qrels file (if any), its grades, its annotations and superseded records, refusing a
    different grade scale (of the annotations, the provenance or the grades)."""
    qrels_path = find_file(root / "qrels" / f"{split}.tsv")
    grades = (
        {(q, d): g for q, docs in read_qrels(qrels_path, allow_empty=True).items() for d, g in docs.items()}
        if qrels_path
        else {}
    )
    annotations, scales, superseded = _read_records(root, split)
    recorded = read_provenance(qrels_path or root / "qrels" / f"{split}.tsv") or {}
    if recorded and isinstance(recorded.get("scale"), list) and len(recorded["scale"]) == 2:
        scales.add((int(recorded["scale"][0]), int(recorded["scale"][1])))
    other = sorted(s for s in scales if s != scale)
    outside = sorted({g for g in grades.values() if not scale[0] <= g <= scale[1]})
    if other or outside:
        what = (
            f"was merged on the scale {other[0][0]}-{other[0][1]}"
            if other
            else f"holds grades {', '.join(map(str, outside))}"
        )
        raise DatasetError(
            f"{qrels_path or annotations_path(root, split)}: split {split!r} {what}, not "
            f"{scale[0]}-{scale[1]} (pass that {setting('scale')}, or merge into a new split; "
            "nothing written)"
        )
    return qrels_path, grades, annotations, superseded, recorded


def _qrels_votes(
    grades: dict[tuple[str, str], int], annotations: list[Judgment], source: str, split: str, rule: tuple[str, str]
) -> tuple[list[Judgment], list[Judgment]]:
    """The qrels' own grades that the recorded annotations neither give nor resolve to (by `rule`, the policy
    and tie rule of the last merge): grades judged before the annotations file, or edited by hand, each the
    vote of annotator ``qrels:SPLIT``; and the recorded ``qrels:SPLIT`` votes they replace."""
    name = f"qrels:{split}"
    by_pair: dict[tuple[str, str], dict[str, Judgment]] = defaultdict(dict)
    for j in annotations:
        by_pair[j.query_id, j.doc_id][j.annotator] = j
    votes, replaced = [], []
    for (query_id, doc_id), grade in sorted(grades.items()):
        given = by_pair.get((query_id, doc_id), {})
        if (
            given
            and grade not in {j.grade for j in given.values()}
            and grade == resolve([j.grade for j in given.values()], *rule)
        ):
            continue  # the last merge's own resolution (a mean no annotator gave)
        if grade not in {j.grade for j in given.values()}:
            votes.append(Judgment(query_id, doc_id, grade, name, source))
            if name in given:
                replaced.append(given[name])
    return votes, replaced


def merge_judgments(
    root: str | Path,
    files: Iterable[str | Path],
    split: str = "test",
    annotator: str | None = None,
    policy: str = "majority",
    scale: tuple[int, int] = (0, 3),
    weights: str = "linear",
    write: bool = True,
    ties: str = "low",
) -> MergeReport:
    """Add the judgments in `files` to `split` of the BEIR folder `root` (see the module's docstring).

    Raises:
        FormatError: An unreadable judgments file.
        DatasetError: Unknown queries/documents, grades off the scale, one annotator grading a pair two ways, a
            split on another scale, (policy ``strict``) any disagreement, or (ties ``refuse``) a disagreement
            the policy cannot decide; nothing is written.
    """
    root = Path(root)
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} ({', '.join(POLICIES)})")
    if ties not in TIES:
        raise ValueError(f"unknown tie rule {ties!r} ({', '.join(TIES)})")
    read = [j for path in files for j in read_judgments(path, annotator)]
    _check_scale(read, scale)
    _check_known(read, root)
    qrels_path, grades, annotations, superseded, before = _existing(root, split, scale)
    target = qrels_path or root / "qrels" / f"{split}.tsv"
    rule = (before.get("policy", policy), before.get("ties", ties))
    rule = rule if rule[0] in POLICIES and rule[1] in TIES and rule[0] != "strict" else ("majority", "low")
    from_qrels, replaced = _qrels_votes(grades, annotations, str(target), split, rule)
    annotations = [j for j in annotations if j not in replaced] + from_qrels
    new = _check_same_annotator([*annotations, *read])
    recorded = {(j.query_id, j.doc_id, j.annotator) for j in annotations}
    fresh = {key: j for key, j in new.items() if key not in recorded}
    votes: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for j in [*annotations, *fresh.values()]:
        votes[j.query_id, j.doc_id][j.annotator] = j.grade
    conflicts = [(q, d, dict(v)) for (q, d), v in sorted(votes.items()) if len(set(v.values())) > 1]
    if policy == "strict" and conflicts:
        raise _refusal(
            f"{len(conflicts)} pairs with disagreeing grades under the strict policy (resolve by "
            "majority, mean or max, or settle them; nothing written):",
            _grades_of(conflicts),
        )
    resolved = {pair: resolve(list(v.values()), policy, ties) for pair, v in votes.items()}
    undecided = [(q, d, votes[q, d]) for (q, d), g in sorted(resolved.items()) if g is None]
    if undecided:
        raise _refusal(
            f"{len(undecided)} pairs the {policy} policy cannot decide, and --ties refuse (pass "
            "--ties low or --ties high, or settle them; nothing written):",
            _grades_of(undecided),
        )
    n_ties = sum(1 for pair, v in votes.items() if resolve(list(v.values()), policy, "refuse") is None)
    changed = [
        (q, d, grades[q, d], g) for (q, d), g in sorted(resolved.items()) if (q, d) in grades and grades[q, d] != g
    ]
    measured = agreement(votes, range(scale[0], scale[1] + 1), weights)
    every = [*annotations, *fresh.values()]
    report = MergeReport(
        target,
        len(read),
        len(resolved),
        sum(1 for p in resolved if p not in grades),
        changed,
        conflicts,
        policy,
        measured,
        ties=ties,
        n_ties=n_ties,
        provenance=_provenance(every, split, policy, ties, scale, measured, len(resolved), len(conflicts), n_ties),
    )
    if write:
        _write(
            root,
            split,
            target,
            resolved,
            every,
            [*superseded, *(_record(j, scale) for j in replaced)],
            scale,
            report.provenance,
        )
        report.written = True
    return report


def _finite(value: float) -> float | None:
    return None if value != value else round(value, 6)


def _provenance(
    annotations: list[Judgment],
    split: str,
    policy: str,
    ties: str,
    scale: tuple[int, int],
    measured: Agreement,
    n_pairs: int,
    n_conflicts: int,
    n_ties: int,
) -> dict:
    return {
        "split": split,
        "annotators": dict(sorted(Counter(j.annotator for j in annotations).items())),
        "policy": policy,
        "ties": ties,
        "scale": list(scale),
        "pairs": n_pairs,
        "disagreements": n_conflicts,
        "settled_by_ties": n_ties,
        "kappa_weights": measured.weights,
        "kappa": [
            {"first": p.first, "second": p.second, "both_graded": p.n, "kappa": _finite(p.kappa)}
            for p in measured.pairs
        ],
        "alpha": _finite(measured.alpha),
        "alpha_level": measured.level,
        "alpha_units": measured.alpha_units,
        "merged_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _record(j: Judgment, scale: tuple[int, int], now: str | None = None) -> dict:
    return {
        "query_id": j.query_id,
        "doc_id": j.doc_id,
        "annotator": j.annotator,
        "grade": j.grade,
        "source": j.source,
        "time": j.time or now,
        "scale": list(scale),
        **({"same_text_as": j.same_text_as} if j.same_text_as else {}),
    }


def _write(
    root: Path,
    split: str,
    target: Path,
    resolved: dict[tuple[str, str], int],
    annotations: list[Judgment],
    superseded: list[dict],
    scale: tuple[int, int],
    provenance: dict,
) -> None:
    now = provenance["merged_at"]
    records = [json.dumps({**record, "superseded": True}, ensure_ascii=False) + "\n" for record in superseded]
    records += [json.dumps(_record(j, scale, now), ensure_ascii=False) + "\n" for j in annotations]
    body = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for (q, d), g in sorted(resolved.items()))
    earlier = read_provenance(target) or {}
    if (
        _same(annotations_path(root, split), "".join(records))
        and _same(target, body)
        and earlier.get("merged_at")
        and {**earlier, "merged_at": now} == provenance
    ):
        provenance["merged_at"] = earlier["merged_at"]  # the same merge again: nothing changes, not even its time
        return
    with atomic_writer(annotations_path(root, split)) as handle:
        handle.write("".join(records))
    write_provenance(target, provenance)
    with atomic_writer(target, "wb") as handle:  # gzip without a time stamp: the same qrels, the same bytes
        handle.write(gzip.compress(body.encode(), mtime=0) if target.name.endswith(".gz") else body.encode())


def _grades_of(pairs: list[tuple[str, str, dict[str, int]]]) -> list[str]:
    """One line per (query, document, annotator → grade) of a refusal: ``(q1, d3): ann=1, bob=2``."""
    return [f"({q}, {d}): " + ", ".join(f"{annotator_text(a)}={g}" for a, g in sorted(v.items())) for q, d, v in pairs]


def _same(path: Path, text: str) -> bool:
    """Whether `path` holds `text` (a ``.gz`` file: once decompressed)."""
    try:
        data = path.read_bytes()
        return (gzip.decompress(data) if path.name.endswith(".gz") else data) == text.encode()
    except (OSError, EOFError, gzip.BadGzipFile):
        return False


def judgment_votes(
    sources: Iterable[str | Path], split: str = "test", annotator: str | None = None, scale: tuple[int, int] = (0, 3)
) -> dict[tuple[str, str], dict[str, int]]:
    """(query, doc) → annotator → grade from BEIR folders' annotations and judgment files, checked as a merge
    checks them (scale, one grade per annotator and pair)."""
    read: list[Judgment] = []
    for source in map(Path, sources):
        if source.is_dir() and not annotations_path(source, split).is_file():
            raise DatasetError(
                f"{annotations_path(source, split)}: no annotations (merge judgments into "
                f"this split first, or pick another with {setting('split')})"
            )
        read += read_annotations(source, split)[0] if source.is_dir() else read_judgments(source, annotator)
    _check_scale(read, scale)
    votes: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for j in _check_same_annotator(read).values():
        votes[j.query_id, j.doc_id][j.annotator] = j.grade
    return votes
