"""Where a command will write is checked before any work: a dangling symbolic link, a file or a read-only folder
named as the output folder is one line naming it and exit code 1, before the dataset is even looked up (the
dataset given here does not exist: had the command gone on, it would have said so instead)."""

from __future__ import annotations

import os

import pytest
from cli_runner import invoke
from readonly import read_only

from harness.errors import OutputError
from harness.io.outputs import check_output_dir, check_output_file

NO_DATA = "no-such-dataset"  # reaching the data would fail differently

COMMANDS = {
    "evaluate": lambda out: ["evaluate", NO_DATA, "--model", "bm25", "--output-dir", out],
    "bench": lambda out: ["bench", "--models", "bm25", "--datasets", NO_DATA, "--output-dir", out],
    "retrieve": lambda out: ["retrieve", NO_DATA, "--model", "bm25", "--out", f"{out}/run.trec"],
    "fuse": lambda out: ["fuse", "missing-a.json", "missing-b.json", "--output-dir", out],
    "convert": lambda out: ["convert", "--corpus", "d.csv", "--queries", "q.csv", "--qrels", "j.csv", "--out", out],
    "pool": lambda out: ["pool", NO_DATA, "--systems", "bm25", "--out", out],
    "export": lambda out: ["export", "missing.json", "--format", "mteb", "--out", out],
}


def _outputs(tmp_path):
    """(name, make): each makes an unusable output folder under `tmp_path` and returns it with the line expected."""
    dangling = tmp_path / "results"

    def make_dangling():
        dangling.symlink_to(tmp_path / "gone" / "results")
        return "results", f"results: a dangling symbolic link to {tmp_path / 'gone' / 'results'}, which does not exist"

    def make_file():
        (tmp_path / "results").write_text("a file")
        return "results", "results: a file, not a folder"

    return {"dangling-symlink": make_dangling, "file": make_file}


@pytest.mark.parametrize("kind", ["dangling-symlink", "file"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unusable_output_folder_is_one_line_before_any_work(tmp_path, monkeypatch, command, kind):
    monkeypatch.chdir(tmp_path)
    out, expected = _outputs(tmp_path)[kind]()
    if command == "retrieve":
        expected += " (on the way to the run file results/run.trec)"
    result = invoke(COMMANDS[command](out))
    lines = result.stderr.splitlines()
    if command in ("convert", "pool") and kind == "file":  # the option itself takes folders only: a usage error
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert "Invalid value for '--out': Directory 'results' is a file" in lines[0]
    else:
        assert result.exit_code == 1, result.output
        assert len(lines) == 1 and lines[0].startswith(f"Error: {expected}"), result.output
    assert "File exists" not in result.stderr and NO_DATA not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # nothing written anywhere


@pytest.mark.parametrize("command", ["evaluate", "convert", "pool"])
def test_a_read_only_output_folder_is_one_line_before_any_work(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ro").mkdir()
    with read_only(tmp_path / "ro"):
        result = invoke(COMMANDS[command]("ro/results"))
    assert result.exit_code == 1, result.output
    why = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
    what = "pool folder" if command == "pool" else "output folder"
    expected = f"Error: ro: cannot write: {why} (on the way to the {what} ro/results) (choose another {what})"
    assert result.stderr.splitlines() == [expected], result.output
    assert list((tmp_path / "ro").iterdir()) == []


def test_a_dangling_link_on_the_way_is_named(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    with pytest.raises(
        OutputError,
        match=r"link: a dangling symbolic link to .*nowhere, which does not exist \(on the way to the output "
        r"folder .*link/a/b\)",
    ):
        check_output_dir(tmp_path / "link" / "a" / "b")


def test_a_usable_folder_passes_and_nothing_is_created(tmp_path):
    check_output_dir(tmp_path / "new" / "deeper")
    check_output_file(tmp_path / "new" / "run.trec")
    check_output_dir(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    check_output_dir(tmp_path / "link")  # a symbolic link to a folder is a folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    with pytest.raises(OutputError, match="run.trec: the run file is a folder"):
        (tmp_path / "run.trec").mkdir()
        check_output_file(tmp_path / "run.trec", "run file")
