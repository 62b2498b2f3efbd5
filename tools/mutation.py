#!/usr/bin/env python
"""Mutation testing of the trust-critical modules, one module at a time (mutmut 2.x).

Usage (from the repository root)::

    python tools/mutation.py                      # every module in MODULES
    python tools/mutation.py merge pool           # just these
    python tools/mutation.py --list               # the modules, their scope and their tests
    python tools/mutation.py --report-only        # counts from the last run's cache, no mutating

Each module is mutated in a scratch copy of the checkout (``.mutation-scratch/``, ignored by git), so the
working tree is never left holding a mutant, even if the run is interrupted. Each mutant runs only the few
test files that cover its module (``pytest -x -q -p no:cacheprovider -n 0``: one process). A big module may be scoped to its
trust-critical functions: only lines inside them are mutated (in the scratch copy, every other line is marked
``# pragma: no mutate``, mutmut's own exclusion).

The report (stdout, and ``docs/mutation-report.md`` unless ``--no-write``) gives per module: mutants,
killed (mutmut's "suspicious", killed but slowly, included), survived, equivalent (a survivor listed in
docs/development.md's "Equivalent mutants" table), timeout, and the score: (killed + timeout) / (all - equivalent). Each survivor that is not listed as
equivalent is printed with its diff.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import io
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".mutation-scratch"
EQUIVALENTS_DOC = ROOT / "docs" / "development.md"
REPORT = ROOT / "docs" / "mutation-report.md"
TARGET = 0.90
STEP_CAP_S = 300  # the longest a mutant's test step may run (a module's own tests take seconds to a minute)


@dataclass(frozen=True)
class Module:
    name: str
    path: str
    tests: tuple[str, ...]
    # The module's own mutation tests (tests/test_mutation_kills_*.py: no fixture of conftest.py), run first with
    # --noconftest (a second faster); `tests` run only for a mutant these let live.
    fast: tuple[str, ...] = field(default_factory=tuple)
    # Qualified names (``function`` or ``Class.method``) whose lines alone are mutated; empty: the whole file.
    scope: tuple[str, ...] = field(default_factory=tuple)
    note: str = ""


MODULES: dict[str, Module] = {
    m.name: m
    for m in [
        Module(
            "llm",
            "harness/judging/llm.py",
            (),
            fast=("tests/test_mutation_kills_llm.py",),
            scope=(
                "SCALE",
                "_FINAL_SCORE",
                "_BARE",
                "_PLACEHOLDER",
                "JudgePrompt.sha256",
                "JudgePrompt.render",
                "parse_grade",
                "answer_content",
                "cache_inputs",
                "cached_grades",
                "JudgeSpec.service_model",
                "JudgeSpec.annotator",
            ),
            note="the judge's cache key and its answer parser",
        ),
        Module(
            "merge",
            "harness/judging/merge.py",
            ("tests/test_judgments.py", "tests/test_merge_provenance.py"),
            fast=("tests/test_mutation_kills_merge.py", "tests/test_mutation_kills_merge_rules.py"),
            scope=(
                "parse_scale",
                "_check_same_annotator",
                "_check_scale",
                "resolve",
                "_existing",
                "_qrels_votes",
                "judgment_votes",
                "merge_judgments",
            ),
            note="the grade each pair gets (reading files and writing them are covered elsewhere)",
        ),
        Module(
            "grade-scale",
            "harness/datasets/convert/grades.py",
            ("tests/test_convert_excel.py",),
            fast=("tests/test_mutation_kills_grade_scale.py", "tests/test_mutation_kills_merge.py"),
            scope=("SCALE", "scale_bounds", "parse_grade_scale"),
            note="the one LOW-HIGH grade-scale reader, convert's and the merge's (merge's parse_scale names it)",
        ),
        Module(
            "agreement",
            "harness/judging/agreement.py",
            ("tests/test_judgments.py", "tests/test_agreement_intervals.py"),
            fast=(
                "tests/test_mutation_kills_agreement.py",
                "tests/test_mutation_kills_agreement_text.py",
                "tests/test_mutation_kills_agreement_intervals.py",
            ),
        ),
        Module(
            "pool",
            "harness/judging/pool.py",
            ("tests/test_pool.py",),
            fast=("tests/test_mutation_kills_pool.py",),
            scope=("check_spec", "pool_runs"),
            note="the pool itself (the folder writing around it is not trust-critical)",
        ),
        Module(
            "fusion-label",
            "harness/retrieval/fusion.py",
            ("tests/test_labels.py",),
            fast=("tests/test_mutation_kills_labels.py",),
            scope=("_number", "FusionSpec.label", "FusionSpec.to_config"),
            note="a fused result's label and recorded settings",
        ),
        Module(
            "labels",
            "harness/reporting/labels.py",
            ("tests/test_labels.py",),
            fast=("tests/test_mutation_kills_labels_rules.py",),
        ),
        Module(
            "scoring",
            "harness/cli/scoring.py",
            ("tests/test_score.py",),
            fast=("tests/test_mutation_kills_score.py",),
            scope=("metrics_callback", "score", "_counted", "_depth_note"),
            note="what `score` prints (its options' help texts are not mutated)",
        ),
        Module(
            "registry",
            "harness/datasets/registry.py",
            ("tests/test_registry.py",),
            fast=("tests/test_mutation_kills_registry.py",),
            scope=("count_mismatch",),
            note="a folder evaluated under a registry name",
        ),
        Module(
            "import-check",
            "harness/datasets/catalog.py",
            ("tests/test_data_fingerprints.py",),
            fast=("tests/test_mutation_kills_registry.py",),
            scope=("_count_lines", "_check_counts"),
            note="a folder imported or installed under a registry name",
        ),
        Module(
            "fingerprints",
            "harness/reporting/report.py",
            ("tests/test_data_fingerprints.py",),
            fast=("tests/test_mutation_kills_fingerprints.py",),
            scope=("DATA_FILES", "data_changes", "data_tag", "folder_fingerprints", "_file_sha256"),
            note="data fingerprints and their memo",
        ),
        Module(
            "bench",
            "harness/pipeline/bench.py",
            ("tests/test_data_fingerprints.py",),
            fast=("tests/test_mutation_kills_fingerprints.py",),
            scope=("_changed_data",),
            note="bench's staleness rule",
        ),
        Module(
            "streamed",
            "harness/retrieval/streamed.py",
            (),
            fast=("tests/test_mutation_kills_streamed.py",),
            scope=("plan_search", "StreamedIndex._search"),
            note="the streamed search's budget and its deeper passes",
        ),
        Module(
            "sharded",
            "harness/engines/ray_search.py",
            (),
            fast=("tests/test_mutation_kills_sharded.py",),
            scope=("plan_shards", "query_blocks"),
            note="how chunks become shards and queries blocks",
        ),
        Module(
            "search-cut",
            "harness/retrieval/index.py",
            (),
            fast=(
                "tests/test_mutation_kills_search_cut.py",
                "tests/test_mutation_kills_sharded.py",
                "tests/test_mutation_kills_streamed.py",
                "tests/test_scan_work.py",
            ),
            scope=("exact_top", "rescore_groups", "merge_top", "_ranked"),
            note="the exact top and the tie rule at the cut, shared by the streamed and the sharded search",
        ),
        Module(
            "scan",
            "harness/retrieval/index.py",
            ("tests/test_streamed.py",),
            fast=("tests/test_scan_work.py",),
            scope=("TopScan.add", "TopScan._merge", "TopScan._admit", "TopScan.result", "scan_top"),
            note="the exact scan both flat searches run: each query's running cut, tile by tile, and its work counts",
        ),
        Module(
            "dense-identity",
            "harness/pipeline/dense/stage.py",
            (),
            fast=("tests/test_mutation_kills_backend_identity.py",),
            scope=("_model_or_lazy",),
            note="the remembered model fingerprint's key (settings, CPU class, runtime versions)",
        ),
        Module(
            "kernel-class",
            "harness/host.py",
            (),
            fast=("tests/test_mutation_kills_backend_identity.py",),
            scope=("kernel_class", "int8_fast_here", "SATURATING_INT8", "int8_saturates"),
            note="the CPU's kernel class, which keys int8 vectors and picks the int8 recipe",
        ),
        Module(
            "onnx-identity",
            "harness/runtimes/onnx_backend.py",
            (),
            fast=("tests/test_mutation_kills_backend_identity.py",),
            scope=("QUANTIZATION", "SATURATING", "quantization", "runtime_identity"),
        ),
        Module(
            "openvino-identity",
            "harness/runtimes/openvino_backend.py",
            (),
            fast=("tests/test_mutation_kills_backend_identity.py",),
            scope=("SATURATING", "quantization", "runtime_identity"),
        ),
        Module(
            "auto-choice",
            "harness/runtimes/auto.py",
            ("tests/test_auto_backend.py",),
            fast=("tests/test_auto_observed.py", "tests/test_runtimes.py"),
            scope=("native_bf16", "installed_candidates", "observe_pick"),
            note="--backend auto's candidates (installed, natively computed) and its pick held to the pace it keeps",
        ),
        Module(
            "metrics",
            "harness/evaluation/metrics.py",
            ("tests/test_metrics.py", "tests/test_score.py"),
            fast=("tests/test_mutation_kills_metrics.py",),
        ),
    ]
}


def scope_lines(path: Path, qualnames: tuple[str, ...]) -> set[int]:
    """The line numbers inside the named functions (``f`` or ``Class.f``, from the ``def`` line) and
    module-level constants (``NAME = ...``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    wanted, found = set(qualnames), set()
    lines: set[int] = set()

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if name in wanted and not isinstance(child, ast.ClassDef):
                    # from the def line: a decorator (a click option's help text) is not the function's logic
                    lines.update(range(child.lineno, child.end_lineno + 1))
                    found.add(name)
                visit(child, f"{name}.")
            elif isinstance(child, (ast.Assign, ast.AnnAssign)) and not prefix:  # a module-level constant
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in wanted:
                        lines.update(range(child.lineno, child.end_lineno + 1))
                        found.add(target.id)

    visit(tree, "")
    missing = wanted - found
    if missing:
        raise SystemExit(f"{path}: no function {', '.join(sorted(missing))} (MODULES in tools/mutation.py)")
    return lines


PRAGMA = "# pragma: no mutate"


def fence_scope(module: Module, where: Path) -> None:
    """Mark every line of the scratch copy of a scoped module outside its scope ``# pragma: no mutate`` (mutmut's
    own exclusion), where a comment can go: the end of a line of code, never inside a string."""
    path = where / module.path
    source = path.read_text(encoding="utf-8")
    inside = scope_lines(path, module.scope)
    ends = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NEWLINE, tokenize.NL) and token.start[1] > 0:
            ends.add(token.start[0])
        elif token.type == tokenize.COMMENT:
            ends.add(token.start[0])
    lines = source.split("\n")
    for number in ends - inside:
        lines[number - 1] += ("  " if "#" not in lines[number - 1] else " ") + PRAGMA
    path.write_text("\n".join(lines), encoding="utf-8")


def make_scratch() -> Path:
    """A fresh copy of the tracked and untracked-but-not-ignored files (git's own view of the tree)."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    caches = SCRATCH / "caches"
    kept = {p.name: p.read_bytes() for p in caches.glob("*.sqlite")} if caches.is_dir() else {}
    if SCRATCH.exists():
        shutil.rmtree(SCRATCH)
    for name in filter(None, files):
        src = ROOT / name
        if not src.is_file() or name.startswith(".mutation-scratch"):
            continue
        dst = SCRATCH / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    caches.mkdir(parents=True)
    for name, data in kept.items():  # each module's last results, for the report
        (caches / name).write_bytes(data)
    return SCRATCH


def cache_of(module: Module, where: Path) -> Path:
    """Where a module's mutmut results are kept: one fresh cache per module and run (mutmut 2.5.1 crashes,
    "Attribute Mutant.line is required", reusing a cache whose lines it renumbered)."""
    return where / "caches" / f"{module.name}.sqlite"


def run_module(module: Module, where: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(where), PYTHONDONTWRITEBYTECODE="1")
    # mutmut's timeout kills the runner (bash), not the pytest inside it, which a mutant that loops forever would keep
    # busy on a core: each step has its own cap (`timeout`: its 124 is a failure, so such a mutant reads as killed)
    pytest = f"timeout -k 5 {STEP_CAP_S} {sys.executable} -m pytest -x -q -p no:cacheprovider -n 0"
    fast = " ".join(t for t in module.fast if (where / t).exists())
    tests = " ".join(t for t in module.tests if (where / t).exists())
    steps = ([f"{pytest} --noconftest {fast}"] if fast else []) + ([f"{pytest} {tests}"] if tests else [])
    # mutmut 2.5.1 counts only exit status 1 as "tests failed": pytest's 2 (a collection error, as a mutant that is
    # a SyntaxError gives) would read as survived, so any failure is made 1
    runner = f"bash -c '( {' && '.join(steps)} ) || exit 1'"
    command = [
        "mutmut",
        "run",
        "--paths-to-mutate",
        module.path,
        "--tests-dir",
        "tests",
        "--runner",
        runner,
        "--no-progress",
        "--simple-output",
    ]
    original = (where / module.path).read_text(encoding="utf-8")
    if module.scope:
        fence_scope(module, where)
    print(
        f"== {module.name}: {module.path}" + (f" (scoped: {', '.join(module.scope)})" if module.scope else ""),
        flush=True,
    )
    print("   " + runner, flush=True)
    (where / ".mutmut-cache").unlink(missing_ok=True)
    # its own process group: an interrupted run takes mutmut's workers and their pytest with it
    process = subprocess.Popen(command, cwd=where, env=env, start_new_session=True)
    try:
        return process.wait()
    except BaseException:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()
        raise
    finally:
        # unfenced again: a second module scoped in the same file fences it afresh
        (where / module.path).write_text(original, encoding="utf-8")
        if (where / ".mutmut-cache").exists():
            shutil.move(where / ".mutmut-cache", cache_of(module, where))


def mutants_of(db: Path, path: str) -> list[tuple[int, int, str, str]]:
    """(id, line number, source line, status) of each mutant mutmut's cache `db` holds for `path`."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT m.id, l.line_number, l.line, m.status FROM Mutant m JOIN Line l ON m.line = l.id "
            'JOIN SourceFile s ON l.sourcefile = s.id WHERE s.filename = ? ORDER BY l.line_number, m."index"',
            (path,),
        ).fetchall()


def mutant_diff(where: Path, mutant_id: int) -> tuple[str, str]:
    """The mutated line before and after (stripped), from ``mutmut show``."""
    shown = subprocess.run(["mutmut", "show", str(mutant_id)], cwd=where, capture_output=True, text=True).stdout
    shown = shown.replace("  " + PRAGMA, "").replace(" " + PRAGMA, "")
    before = [line[1:].strip() for line in shown.splitlines() if line.startswith("-") and not line.startswith("---")]
    after = [line[1:].strip() for line in shown.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(before), " / ".join(after)


def _cells(row: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", row.strip().strip("|"))
    return [c.strip().replace("\\|", "|").strip("`").strip() for c in cells]


def read_equivalents() -> dict[tuple[str, str, str], str]:
    """(module path, original line, mutated line) → reason, from the table under "### Equivalent mutants"."""
    text = EQUIVALENTS_DOC.read_text(encoding="utf-8")
    section = text.split("### Equivalent mutants", 1)
    if len(section) < 2:
        return {}
    found = {}
    for row in section[1].split("\n#", 1)[0].splitlines():
        if not row.startswith("|") or set(row) <= set("|-: "):
            continue
        cells = _cells(row)
        if len(cells) >= 4 and cells[0].startswith("harness/"):
            found[cells[0], cells[1], cells[2]] = cells[3]
    return found


def tally(module: Module, where: Path, equivalents) -> tuple[dict[str, int], list[str]]:
    counts = dict(mutants=0, killed=0, survived=0, equivalent=0, timeout=0, suspicious=0, untested=0)
    lost = []
    db = cache_of(module, where)
    show = where / "show" / module.name  # `mutmut show` reads ./.mutmut-cache and the fenced source: its own copy
    if db.exists():  # (never the scratch copy's own cache, which a run may be writing)
        shutil.rmtree(show, ignore_errors=True)
        (show / module.path).parent.mkdir(parents=True)
        shutil.copy(db, show / ".mutmut-cache")
        if (ROOT / module.path).exists():
            shutil.copy(ROOT / module.path, show / module.path)
            if module.scope:
                fence_scope(module, show)
    inside = scope_lines(ROOT / module.path, module.scope) if module.scope else None
    for mutant_id, number, _line, status in mutants_of(db, module.path):
        if inside is not None and number + 1 not in inside:  # a line continued by a backslash takes no pragma
            continue
        counts["mutants"] += 1
        if status == "ok_killed":
            counts["killed"] += 1
        elif status == "bad_timeout":
            counts["timeout"] += 1
        elif status == "ok_suspicious":  # killed, but slower than mutmut expected
            counts["killed"] += 1
            counts["suspicious"] += 1
        elif status == "bad_survived":
            before, after = mutant_diff(show, mutant_id)
            if (module.path, before, after) in equivalents:
                counts["equivalent"] += 1
            else:
                counts["survived"] += 1
                lost.append(f"   survived #{mutant_id} line {number + 1}: {before!r} -> {after!r}")
        else:
            counts["untested"] += 1
    return counts, lost


def score(counts: dict[str, int]) -> float | None:
    live = counts["mutants"] - counts["equivalent"] - counts["untested"]
    # a timeout is a mutant the tests stopped (an endless loop): killed, as mutmut's own summary counts it
    return (counts["killed"] + counts["timeout"]) / live if live else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"some of: {', '.join(MODULES)} (default: all)")
    parser.add_argument("--list", action="store_true", help="print the modules, their scope and tests")
    parser.add_argument("--report-only", action="store_true", help="tally the last run's cache, mutate nothing")
    parser.add_argument("--no-write", action="store_true", help=f"do not rewrite {REPORT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    chosen = [MODULES[m] for m in (args.modules or MODULES)]
    if args.list:
        for m in chosen:
            if m.scope:
                scope_lines(ROOT / m.path, m.scope)  # a scope naming a function that moved away fails here
            print(
                f"{m.name:12} {m.path}  scope: {', '.join(m.scope) or 'whole file'}\n{'':12} tests: "
                f"{' '.join(m.fast + m.tests)}"
            )
        return 0
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill PID stops mutmut's process group too
    where = SCRATCH if args.report_only else make_scratch()
    if not args.report_only:
        for module in chosen:
            run_module(module, where)
    equivalents = read_equivalents()
    rows, failed = [], False
    for module in MODULES.values():  # the report covers every module the cache has results for
        counts, lost = tally(module, where, equivalents)
        if not counts["mutants"]:
            continue
        s = score(counts)
        failed |= s is not None and s < TARGET
        rows.append((module, counts, s))
        print(f"{module.name:10} {counts}  score {'-' if s is None else f'{s:.1%}'}")
        print("\n".join(lost))
    if not args.no_write and rows:
        write_report(rows)
    return 1 if failed else 0


def write_report(rows) -> None:
    old = REPORT.read_text(encoding="utf-8") if REPORT.exists() else ""
    previous = {}
    for line in old.splitlines():  # keep the rows of modules this run did not tally
        cells = _cells(line) if line.startswith("| ") else []
        if len(cells) >= 11 and cells[1].startswith("harness/"):
            previous[cells[0]] = line
    today = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    for module, counts, s in rows:
        scope = ", ".join(f"`{q}`" for q in module.scope) or "whole file"
        previous[module.name] = (
            f"| {module.name} | `{module.path}` | {scope} | {counts['mutants']} | {counts['killed']} | "
            f"{counts['survived']} | {counts['equivalent']} | {counts['timeout']} | {counts['untested']} | "
            f"{'-' if s is None else f'{s:.1%}'} | {today} |"
        )
    head = [
        "# Mutation report",
        "",
        "The last measured run of `python tools/mutation.py` (mutmut 2.5.1), one module at a time, each mutant "
        "tested by the module's own few test files (`python tools/mutation.py --list`). Score: killed (and timed "
        "out) / (mutants - equivalent). Equivalent mutants, each with its reason, are listed in "
        "[Development](development.md#equivalent-mutants). Re-run a module whenever it changes: "
        "`python tools/mutation.py MODULE`.",
        "",
        "Command: `python tools/mutation.py [MODULE ...]`, then `python tools/mutation.py --report-only` (this "
        "table). Not tested: mutants the run did not reach (it was stopped); the score counts only tested ones.",
        "",
        "| module | file | mutated | mutants | killed | survived | equivalent | timeout | not tested | score "
        "| measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = list(MODULES)
    body = [previous[name] for name in sorted(previous, key=lambda n: order.index(n) if n in order else 99)]
    notes = old[old.index("\n## Notes") :] if "\n## Notes" in old else ""  # kept as written by hand
    REPORT.write_text("\n".join(head + body) + "\n" + notes, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
