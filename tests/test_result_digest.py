"""Results that notice an edit: every result file records the sha256 of its own content, and every command that
reads results (report in every format, compare, export, inspect, fuse, bench's skip, results.csv) checks it, and
checks each mean against its per-query values, before it shows a number.

Expected digests and means come from a loop written out here (the documented canonical JSON, a plain sum over
the per-query values divided by ``n_queries``), never from the code under test. Every case goes through the real
CLI (CliRunner) on results `bench` wrote for the tiny dataset (bm25 and the ``hash:64`` stand-in encoder).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.io.trec import read_run
from harness.records import Result, Run
from harness.reporting.report import write_result

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny"
SYSTEMS = ("bm25", "hash_64")
DIGEST = "content digest does not match"


def _bench(tiny: Path, results: Path, models: str = "bm25,hash:64"):
    return invoke(
        ["-q", "bench", "--models", models, "--datasets", str(tiny), "--output-dir", str(results), "--no-cache"],
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path]:
    """(the tiny dataset folder, a results folder bench wrote: tiny/bm25/test.json and tiny/hash_64/test.json)."""
    root = tmp_path_factory.mktemp("digest")
    tiny = root / "tiny"
    shutil.copytree(TINY, tiny)
    ran = _bench(tiny, root / "results")
    assert ran.exit_code == 0, ran.output
    return tiny, root / "results"


def _canonical_sha256(data: dict) -> str:
    """The digest docs/outputs.md defines, written out: everything but fingerprints.content, keys sorted, no spaces."""
    copy = json.loads(json.dumps(data))
    copy["fingerprints"].pop("content", None)
    return hashlib.sha256(json.dumps(copy, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _means(data: dict) -> dict[str, float]:
    """Each metric's mean over the judged queries, by a plain loop."""
    means = {}
    for metric in data["metrics"]:
        total = 0.0
        for row in data["per_query"].values():
            total += row[metric]
        means[metric] = total / data["n_queries"] if data["n_queries"] else 0.0
    return means


def _assert_genuine(path: Path) -> None:
    data = json.loads(path.read_text())
    assert data["fingerprints"]["content"] == _canonical_sha256(data)
    assert data["n_queries"] == len(data["per_query"])
    for metric, mean in _means(data).items():
        assert data["metrics"][metric] == pytest.approx(mean, rel=1e-12, abs=1e-15)


def _copy(base: tuple[Path, Path], scratch: Path) -> Path:
    results = scratch / "results"
    shutil.copytree(base[1], results)
    return results


def _rewrite(path: Path, edit) -> dict:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))
    return data


def _refusing_consumers(results: Path, edited: Path, other: Path, scratch: Path) -> dict[str, tuple[list, list]]:
    """name → (the command line, the files it must not write) of every command that reads results."""
    root = str(results)
    return {
        "report markdown": (["report", root, "--out", str(scratch / "t.md")], [scratch / "t.md"]),
        "report csv": (["report", root, "--format", "csv"], []),
        "report latex": (["report", root, "--format", "latex"], []),
        "report json": (["report", root, "--format", "json"], []),
        "report html": (["report", root, "--format", "html", "--out", str(scratch / "p.html")], [scratch / "p.html"]),
        "report cost": (["report", root, "--cost"], []),
        "report metrics": (["report", root, "--metric", "nDCG@10", "--metric", "Recall@10"], []),
        "compare": (["compare", str(other), str(edited), "--rounds", "10"], []),
        "export csv": (["export", root, "--format", "csv", "--out", str(scratch / "x.csv")], [scratch / "x.csv"]),
        "export trec": (["export", root, "--format", "trec", "--out", str(scratch / "trec")], [scratch / "trec"]),
        "export mteb": (["export", root, "--format", "mteb", "--out", str(scratch / "mteb")], [scratch / "mteb"]),
        "inspect": (["inspect", str(edited)], []),
        "fuse": (["fuse", str(other), str(edited), "--output-dir", root], [results / "tiny" / "fusion"]),
    }


def _shown_average(stderr: str) -> float:
    return float(re.search(r"but its per-query values average (-?[0-9.]+)", stderr).group(1))


KINDS = ("mean", "per-query", "n_queries", "config", "label", "dataset")


@st.composite
def edits(draw, data: dict, kind: str):
    """An edit of one field of a result (`kind`: a mean, a per-query value, n_queries, the config, the label, the
    dataset's name), to a drawn value that differs from the one written."""
    new = draw(st.floats(0, 1, allow_nan=False).filter(lambda v: v not in (0.0, 1.0)) | st.sampled_from([0.0, 1.0]))
    metric = draw(st.sampled_from(sorted(data["metrics"])))
    query = draw(st.sampled_from(sorted(data["per_query"])))
    if kind == "mean":
        new = new if abs(new - data["metrics"][metric]) > 1e-6 else data["metrics"][metric] + 0.5

        def edit(d):
            d["metrics"][metric] = new
    elif kind == "per-query":
        new = new if abs(new - data["per_query"][query][metric]) > 1e-6 else data["per_query"][query][metric] + 0.5

        def edit(d):
            d["per_query"][query][metric] = new
    elif kind == "n_queries":
        count = draw(st.integers(1, 50).filter(lambda n: n != data["n_queries"]))

        def edit(d):
            d["n_queries"] = count
    elif kind == "config":
        key = draw(st.sampled_from([*sorted(data["config"]), "top_k", "added"]))
        value = draw(st.integers(1, 10_000) | st.text(max_size=8))

        def edit(d):
            d["config"][key] = value if d["config"].get(key) != value else f"{value}!"
    elif kind == "label":
        label = draw(st.text(min_size=1, max_size=12).filter(lambda text: text.strip() and text != data["label"]))

        def edit(d):
            d["label"] = label
    else:
        name = draw(st.sampled_from(["scifact", "nfcorpus", "tiny2"]))

        def edit(d):
            d["dataset"] = name

    return edit


def test_written_results_carry_their_digest_and_read_back_unchanged(base):
    tiny, results = base
    for system in SYSTEMS:
        path = results / "tiny" / system / "test.json"
        _assert_genuine(path)
        data = json.loads(path.read_text())
        assert len(data["fingerprints"]["content"]) == 64
        read = Result.from_json(path)
        with tempfile.TemporaryDirectory() as again:  # written again with its own run: the same digest
            write_result(read, read_run(read.run_path), again)
            rewritten = Path(again) / "tiny" / system / "test.json"
            _assert_genuine(rewritten)
            assert json.loads(rewritten.read_text()) == data
            assert Result.from_json(rewritten) == read  # the round trip keeps every field


def test_the_check_docs_outputs_md_shows_tells_a_written_result_from_an_edited_one(base, tmp_path):
    (example,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "outputs.md").read_text(encoding="utf-8"), re.S)
    namespace: dict = {}
    exec(compile(example, "docs/outputs.md", "exec"), namespace)  # noqa: S102 - our own documentation
    results = _copy(base, tmp_path)
    path = results / "tiny" / "bm25" / "test.json"
    assert namespace["content_digest_matches"](path)
    _rewrite(path, lambda data: data["metrics"].update({"nDCG@10": 0.9999}))
    assert not namespace["content_digest_matches"](path)


_VALUES = st.floats(allow_nan=False, allow_infinity=False, width=64) | st.integers(-(2**70), 2**70)
_JSONISH = st.recursive(
    st.none() | st.booleans() | _VALUES | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3).map(tuple) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(
    per_query=st.dictionaries(
        st.text(min_size=1, max_size=6),
        st.fixed_dictionaries({"nDCG@10": st.floats(0, 1), "P@5": st.sampled_from([0.0, 0.2, 0.4, 1.0])}),
        min_size=1,
        max_size=6,
    ),
    config=st.dictionaries(st.text(max_size=6), _JSONISH, max_size=4),
    label=st.text(max_size=10),
    cost=st.dictionaries(st.text(max_size=6), _VALUES | st.none(), max_size=3),
)
def test_any_result_reads_back_with_the_digest_it_was_written_with(per_query, config, label, cost):
    """Unicode ids and labels, tuples, -0.0, huge ints and subnormal floats anywhere: the digest of the file as
    read equals the one it records, and `report` prints the mean written (the brute-force mean)."""
    n = len(per_query)
    means = {metric: sum(row[metric] for row in per_query.values()) / n for metric in ("nDCG@10", "P@5")}
    result = Result(
        dataset="tiny",
        split="test",
        model="m",
        metrics=means,
        per_query=per_query,
        n_queries=n,
        config=config,
        fingerprints={"corpus": "c", "queries": "q", "qrels": "r"},
        timings={},
        versions={},
        created="now",
        label=label,
        cost=cost,
    )
    with tempfile.TemporaryDirectory() as out:
        path, _ = write_result(result, Run({"q": {"d": 1.0}}), out)
        data = json.loads(path.read_text())
        assert data["fingerprints"]["content"] == _canonical_sha256(data)
        shown = invoke(["report", out, "--format", "csv"])
        assert shown.exit_code == 0, shown.output
        assert float(list(csv.reader(io.StringIO(shown.stdout)))[1][-1]) == means["nDCG@10"]
        assert "written before" not in shown.stderr


@pytest.mark.parametrize("kind", KINDS)
@settings(derandomize=True, deadline=None, max_examples=4)
@given(draw=st.data(), target=st.sampled_from(SYSTEMS))
def test_an_edit_to_any_field_is_refused_by_every_reader(base, kind, draw, target):
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        results = _copy(base, scratch)
        edited = results / "tiny" / target / "test.json"
        other = results / "tiny" / next(s for s in SYSTEMS if s != target) / "test.json"
        edit = draw.draw(edits(json.loads(edited.read_text()), kind), label="edit")
        data = _rewrite(edited, edit)
        expected = _means(data)  # what the per-query values average now, by a plain loop
        wrong = [m for m in data["metrics"] if abs(data["metrics"][m] - expected[m]) > 1e-9 * max(1, expected[m])]
        for name, (args, unwritten) in _refusing_consumers(results, edited, other, scratch).items():
            ran = invoke(args)
            assert ran.exit_code == 1, (name, kind, ran.output)
            line = ran.stderr.strip()
            assert "\n" not in line and f"{edited}: " in line and DIGEST in line, (name, kind, line)
            if kind == "n_queries":
                assert f"n_queries is {data['n_queries']} but it holds per-query values of 3 queries" in line
            if kind in ("mean", "per-query", "n_queries") and wrong:
                metric = next(m for m in data["metrics"] if m in wrong)
                assert f"{metric} is " in line, (name, line)
                digits = len(re.search(r"average -?[0-9]+\.([0-9]+)", line).group(1))
                assert _shown_average(line) == pytest.approx(expected[metric], abs=0.51 * 10**-digits)
            for path in unwritten:
                assert not path.exists(), (name, path)
        # bench never serves the edited cell: it runs it again, and results.csv holds no edited number.
        rerun = _bench(base[0], results, "bm25")
        assert rerun.exit_code == 0, rerun.output
        assert f"{edited}: " in rerun.stderr and DIGEST in rerun.stderr
        rows = list(csv.DictReader(open(results / "results.csv")))
        if target == "bm25":
            assert "1 cells: 1 done, 0 skipped" in rerun.stdout and "running the cell again" in rerun.stderr
            _assert_genuine(edited)
            written = json.loads(edited.read_text())
            assert {r["metric"]: float(r["value"]) for r in rows if r["model"] == "bm25"} == written["metrics"]
        else:  # not a cell of this bench: left out of results.csv, with a warning naming it
            assert "1 cells: 0 done, 1 skipped" in rerun.stdout and "left out of results.csv" in rerun.stderr
            assert {r["model"] for r in rows} == {"bm25"}


def _old(path: Path, edit=None) -> dict:
    def strip(data):
        del data["fingerprints"]["content"]
        if edit is not None:
            edit(data)

    return _rewrite(path, strip)


_NOTE = "written before results recorded a digest of their content"


def test_an_old_result_is_read_with_one_note_and_its_numbers_shown(base, tmp_path):
    results = _copy(base, tmp_path)
    old = results / "tiny" / "bm25" / "test.json"
    other = results / "tiny" / "hash_64" / "test.json"
    data = _old(old)
    mean = _means(data)["nDCG@10"]
    report = invoke(["report", str(results), "--format", "csv"])
    assert report.exit_code == 0, report.output
    assert report.stdout.splitlines()[1].split(",")[1] == repr(mean)
    assert report.stderr.count(_NOTE) == 1
    assert f"{old}: {_NOTE}" in report.stderr and "means were checked against its per-query values" in report.stderr
    for name, (args, _) in _refusing_consumers(results, old, other, tmp_path).items():
        ran = invoke(args)
        no_task = name == "export mteb" and "MTEB has no task for any of these datasets" in ran.stderr  # tiny
        assert ran.exit_code == 0 or no_task, (name, ran.output)
        assert ran.stderr.count(_NOTE) == 1 and f"{old}: {_NOTE}" in ran.stderr, (name, ran.stderr)


@pytest.mark.parametrize("field", ["mean", "per-query", "n_queries"])
def test_an_old_result_whose_means_disagree_with_its_per_query_values_is_refused(base, tmp_path, field):
    results = _copy(base, tmp_path)
    old = results / "tiny" / "bm25" / "test.json"
    other = results / "tiny" / "hash_64" / "test.json"

    def edit(data):
        if field == "mean":
            data["metrics"]["nDCG@10"] = 0.9999
        elif field == "per-query":
            data["per_query"]["q1"]["nDCG@10"] = 0.0 if data["per_query"]["q1"]["nDCG@10"] else 1.0
        else:
            data["n_queries"] = 4

    data = _old(old, edit)
    expected = _means(data)
    first = next(m for m, mean in data["metrics"].items() if abs(mean - expected[m]) > 1e-9)  # in the file's order
    for name, (args, unwritten) in _refusing_consumers(results, old, other, tmp_path).items():
        ran = invoke(args)
        assert ran.exit_code == 1, (name, ran.output)
        line = ran.stderr.strip()
        assert f"{old}: " in line and f"{first} is " in line and DIGEST not in line, (name, line)
        assert _shown_average(line) == pytest.approx(expected[first], abs=5e-5)
        if field == "n_queries":
            assert "n_queries is 4 but it holds per-query values of 3 queries" in line
        assert not any(path.exists() for path in unwritten), name


TOLERANCE = 1e-9  # the relative tolerance of a mean against its per-query values, as docs/outputs.md states it


@pytest.mark.parametrize(
    ("times", "sign", "refused"),
    [(10, 1, True), (10, -1, True), (0.1, 1, False), (0.1, -1, False)],
    ids=["10x-up-refused", "10x-down-refused", "0.1x-up-accepted", "0.1x-down-accepted"],
)
def test_a_mean_is_checked_against_its_per_query_values_at_the_documented_tolerance(
    base, tmp_path, times, sign, refused
):
    """Old results (no content digest: only the mean check applies) whose nDCG@10 is moved by `times` the
    tolerance, relatively: refused by `report` (load_results), left out of results.csv and run again by bench
    above it; read as written below it (the numbers only `math.fsum` rounding would move)."""
    results = _copy(base, tmp_path)
    moved = {}

    def edit(data):
        mean = data["metrics"]["nDCG@10"]
        assert mean > 0.1  # far above the absolute floor (1e-12): the relative tolerance decides
        data["metrics"]["nDCG@10"] = moved[data["model"]] = mean * (1 + sign * times * TOLERANCE)

    for system in SYSTEMS:
        _old(results / "tiny" / system / "test.json", edit)
    report = invoke(["report", str(results), "--format", "csv"])
    bm25, hash_64 = (results / "tiny" / system / "test.json" for system in SYSTEMS)
    if refused:
        assert report.exit_code == 1 and f"{bm25}: nDCG@10 is " in report.stderr, report.output
    else:  # read as written (the note of old results aside)
        assert report.exit_code == 0 and _NOTE in report.stderr, report.output
        header, row = report.stdout.strip().splitlines()
        assert dict(zip(header.split(","), row.split(","))) == {
            "dataset": "tiny",
            **{model: repr(value) for model, value in moved.items()},
        }
    # bench: the bm25 cell is served only when its result passes; hash_64 (no cell of this bench) reaches
    # results.csv only when it passes.
    rerun = _bench(base[0], results, "bm25")
    assert rerun.exit_code == 0, rerun.output
    rows = list(csv.DictReader(open(results / "results.csv")))
    if refused:
        assert "1 cells: 1 done, 0 skipped" in rerun.stdout and "running the cell again" in rerun.stderr
        assert f"{hash_64}: " in rerun.stderr and "left out of results.csv" in rerun.stderr
        assert {r["model"] for r in rows} == {"bm25"}
        _assert_genuine(bm25)  # written again
    else:
        assert "1 cells: 0 done, 1 skipped" in rerun.stdout and "left out of results.csv" not in rerun.stderr
        assert {r["model"] for r in rows} == {"bm25", "hash:64"}
        for model, value in moved.items():
            assert value in [float(r["value"]) for r in rows if r["model"] == model]


def test_other_json_in_a_results_folder_is_passed_over_and_a_file_named_is_refused(base, tmp_path):
    from harness.errors import HarnessError
    from harness.reporting.report import load_results

    results = _copy(base, tmp_path)
    strays = {  # path → (its text, why it is not a result)
        results / "notes.json": ('{"plot": [1, 2]}', "no dataset, split"),
        results / "tiny" / "figure.json": ("[1, 2]", "no dataset, split"),
        results / "tiny" / "bm25" / "broken.json": ("{", "invalid JSON"),
        results / "tiny" / "bm25" / "partial.json": ('{"dataset": "tiny"}', "no split, model"),
    }
    for path, (text, _) in strays.items():
        path.write_text(text)
    loaded = load_results([results])
    assert sorted(r.path for r in loaded) == [results / "tiny" / system / "test.json" for system in SYSTEMS]
    shown = invoke(["report", str(results), "--format", "csv"])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[0] == "dataset,bm25,hash:64"
    for path, (_, why) in strays.items():  # named on purpose: refused, saying why it is not a result
        said = f"{path}: not a beir-harness result file ({why}"
        with pytest.raises(HarnessError, match=re.escape(said)):
            load_results([path])
        named = invoke(["report", str(path)])
        assert named.exit_code == 1 and said in named.stderr, named.output


def test_a_run_file_altered_after_its_result_is_refused_where_it_is_read(base, tmp_path):
    results = _copy(base, tmp_path)
    result = results / "tiny" / "bm25" / "test.json"
    other = results / "tiny" / "hash_64" / "test.json"
    run = result.with_name("test.run.trec")
    lines = run.read_text().splitlines()
    run.write_text("\n".join([*lines[:-1], lines[-1].replace(lines[-1].split()[4], "99.0")]) + "\n")
    for args in (
        ["inspect", str(result)],
        ["export", str(results), "--format", "trec", "--out", str(tmp_path / "trec")],
        ["report", str(results), "--format", "html", "--out", str(tmp_path / "p.html")],
        ["fuse", str(other), str(result), "--output-dir", str(results)],
    ):
        ran = invoke(args)
        assert ran.exit_code == 1 and f"{result}: its run file test.run.trec was altered" in ran.stderr, args
    assert not (tmp_path / "trec").exists() and not (tmp_path / "p.html").exists()
    # Readers of the numbers alone do not read the run: the table is still shown.
    assert invoke(["report", str(results)]).exit_code == 0
