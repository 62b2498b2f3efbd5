"""The output folder: what a conversion may do to it (new, replace, add a split), the staging sibling it is
built in and renamed from, the last checks before the rename, and the summary of what was written."""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from harness.datasets.convert.options import ConversionSummary, ConvertOptions
from harness.datasets.convert.problems import SHOWN, Problems
from harness.datasets.convert.writer import Judgments, RecordWriter
from harness.errors import FormatError, OutputError, setting
from harness.io.exclusions import EXCLUSIONS_FOLDER, write_exclusions
from harness.io.formats import default_permissions, find_file, private_dir, remove_stale_temporaries, write_qrels
from harness.io.ids import first_normalisation_hint
from harness.io.outputs import check_output_dir

logger = logging.getLogger(__name__)


class Staging:
    """A temporary sibling folder that becomes the output folder only when complete."""

    def __init__(self, out: Path):
        self.out = out
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            if remove_stale_temporaries(out.parent, f".{out.name}.convert."):
                logger.info("removed the staging folder of an interrupted conversion next to %s", out)
            self.root = private_dir(out.parent, f".{out.name}.convert")
            default_permissions(self.root, folder=True)
            (self.root / "qrels").mkdir()
            self.excluded: Path | None = None  # the excluded pairs written, when given
        except OSError as exc:
            raise OutputError(f"{out}: cannot write: {exc.strerror or exc} (choose another {setting('out')})") from exc

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:  # any failure, Ctrl-C included: nothing half-made stays behind
            self.discard()

    def finish(
        self,
        summary: ConversionSummary,
        judgments: Judgments,
        queries: RecordWriter,
        docs: RecordWriter,
        names: tuple[str, str],
        options: ConvertOptions,
        problems: Problems,
        excluded: Judgments | None = None,
    ) -> None:
        """Check the judgments (and the excluded pairs) resolve, refuse if any row had a problem, write the qrels
        (and ``excluded/<split>.tsv``), summarise, and move the folder into place."""
        _unresolved(judgments, (queries.ids, docs.ids), (queries.dropped, docs.dropped), names, problems)
        if excluded is not None:
            _unresolved(excluded, (queries.ids, docs.ids), (queries.dropped, docs.dropped), names, problems, "pair")
        problems.raise_any()
        summary.n_judgments = write_qrels(judgments.rows(), self.root / "qrels" / f"{options.split}.tsv")
        if excluded is not None:
            self.excluded = self.root / EXCLUSIONS_FOLDER / f"{options.split}.tsv"
            summary.n_excluded = write_exclusions(excluded.by_pair, self.excluded)
        _summarize(summary, judgments, queries, docs, options.grade_scale)
        self.commit(summary.mode, options.split)

    def commit(self, mode: str, split: str) -> None:
        try:
            if mode == "add-split":
                if self.excluded is not None:
                    (self.out / EXCLUSIONS_FOLDER).mkdir(exist_ok=True)
                    os.replace(self.excluded, self.out / EXCLUSIONS_FOLDER / self.excluded.name)
                os.replace(self.root / "qrels" / f"{split}.tsv", self.out / "qrels" / f"{split}.tsv")
                self.discard()
            elif mode == "new":
                if self.out.is_dir():
                    self.out.rmdir()  # an empty folder
                os.rename(self.root, self.out)
            else:
                # Keep the old folder until the new one is in place; a crash in between leaves both.
                old = private_dir(self.out.parent, f".{self.out.name}.old")
                os.rename(self.out, old / "folder")
                os.rename(self.root, self.out)
                shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            self.discard()
            raise OutputError(
                f"{self.out}: cannot move the converted folder into place: {exc.strerror or exc}"
            ) from exc


def plan_folder(out: Path, split: str, force: bool) -> str:
    """``new``, ``replace`` or ``add-split``; refuse to touch an existing folder otherwise, and a folder that
    cannot be written (a dangling symbolic link, a file, read-only) before any input is read."""
    check_output_dir(out)
    if out.exists() or out.is_symlink():
        check_output_dir(out.parent)  # the folder is staged beside it and renamed into place
    if not out.exists():
        return "new"
    if not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder (choose another {setting('out')})")
    if not any(out.iterdir()):
        return "new"
    if force:
        return "replace"
    if existing_beir_files(out) is None:
        raise OutputError(f"{out}: exists and is not a BEIR folder; pass {setting('force')} to replace it")
    if any((out / "qrels" / name).exists() for name in (f"{split}.tsv", f"{split}.tsv.gz")):
        raise OutputError(
            f"{out}: qrels/{split}.tsv already exists; pass {setting('force')} to replace the folder, "
            f"or --split NAME to add another split"
        )
    return "add-split"


def existing_beir_files(out: Path) -> dict[str, Path] | None:
    """The corpus and queries files of an existing BEIR folder, or None."""
    paths = {"corpus": find_file(out / "corpus.jsonl"), "queries": find_file(out / "queries.jsonl")}
    return paths if all(paths.values()) else None


def _unresolved(
    judgments: Judgments,
    known_ids: tuple[Any, Any],
    dropped_ids: tuple[dict[str, str], dict[str, str]],
    names: tuple[str, str],
    problems: Problems,
    what: str = "judgment",
) -> None:
    """Judgments (or excluded pairs: `what`) whose query or document does not exist, one problem for each kind,
    listing the first ones."""
    for index, kind in enumerate(("queries", "documents")):
        known, dropped = known_ids[index], dropped_ids[index]
        bad = [(pair[index], position) for pair, (_, position) in judgments.by_pair.items() if pair[index] not in known]
        if not bad:
            continue
        shown = ", ".join(
            f"{judgments.unit} {position} {record_id!r}" + (" (dropped: empty text)" if record_id in dropped else "")
            for record_id, position in bad[:SHOWN]
        )
        more = f" and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        unicode = first_normalisation_hint(dict(bad), known, names[index])
        problems.add(
            FormatError(
                judgments.path,
                f"{len(bad)} {what}(s) name unknown {kind}: {shown}{more}",
                hint=f"every id must be in {names[index]}" + (f"; {unicode}" if unicode else ""),
            )
        )


def _summarize(
    summary: ConversionSummary,
    judgments: Judgments,
    queries: RecordWriter,
    docs: RecordWriter,
    scale: tuple[int, int] | None,
) -> None:
    judged = {query_id for query_id, _ in judgments.by_pair}
    summary.n_docs = docs.count or len(docs.ids)
    summary.n_queries = queries.count or len(queries.ids)
    summary.n_judged_queries = len(judged)
    summary.grades = dict(Counter(grade for grade, _ in judgments.by_pair.values()))
    if scale:
        summary.grade_scale = f"{scale[0]}-{scale[1]} (given; every grade within it)"
    elif not summary.grades:  # converted without judgments: the folder is not judged yet (pool it)
        summary.grade_scale = ""
    else:
        low, high = min(summary.grades), max(summary.grades)
        summary.grade_scale = (
            f"{low}-{high} (the grades found, not checked: pass {setting('grade_scale')} "
            f"{low}-{high} or your scale to check them)"
        )
    summary.dropped_docs = len(docs.dropped)
    summary.dropped_queries = len(queries.dropped)
    if docs.dropped or queries.dropped:
        summary.warnings.append(
            f"dropped {len(docs.dropped)} document(s) and {len(queries.dropped)} quer(y/ies) with empty text"
        )
    if queries.count and judged:
        unjudged = sorted(queries.ids.keys() - judged)
        summary.unjudged_queries = len(unjudged)
        if unjudged:
            summary.warnings.append(
                f"{len(unjudged)} quer{'y has' if len(unjudged) == 1 else 'ies have'} no judgment in this split "
                f"(kept in queries.jsonl): {', '.join(unjudged[:SHOWN])}{' ...' if len(unjudged) > SHOWN else ''}"
            )
    for warning in summary.warnings:
        logger.warning(warning)
