"""Labels: every system has one readable, unique label, the same in every output, and bench takes LABEL=SYSTEM.

The expected labels are written out here by hand (what a reader should see); they are never built with the
harness's own label functions.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from pathlib import Path

import pytest
from cli_runner import invoke

import harness.retrieval.encode
from harness.errors import HarnessError
from harness.records import Result
from harness.reporting.labels import check_label, column_labels, display_label
from harness.retrieval.fusion import FusionSpec

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
FUSIONS = (
    f"rrf(bm25, {MINILM}), wsum(bm25, {MINILM}, weights=0.3:0.7, norm=zscore), "
    f"wsum(bm25, {MINILM}, weights=0.7:0.3), combsum(bm25, {MINILM}, norm=zscore)"
)
EXPECTED = [
    "bm25",
    "all-MiniLM-L6-v2",
    "rrf(bm25, all-MiniLM-L6-v2)",
    "wsum(bm25, all-MiniLM-L6-v2; 0.3:0.7, zscore)",
    "wsum(bm25, all-MiniLM-L6-v2; 0.7:0.3)",
    "combsum(bm25, all-MiniLM-L6-v2; zscore)",
]


def _balanced(text: str) -> bool:
    stack = []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in ")]}":
            if not stack or stack.pop() != {")": "(", "]": "[", "}": "{"}[char]:
                return False
    return not stack


@pytest.fixture
def fused_results(tiny_beir, tmp_path, monkeypatch, fake_encoder):
    """bm25, a dense model named as MiniLM (the fake encoder behind it) and four fusions of them, by bench."""
    fake_encoder.name = MINILM
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    out = tmp_path / "results"
    result = invoke(
        [
            "-q",
            "bench",
            "--systems",
            f"bm25, {MINILM}, {FUSIONS}",
            "--datasets",
            str(tiny_beir),
            "--output-dir",
            str(out),
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.output
    return out


def _report(out, *options) -> str:
    result = invoke(["report", str(out), *options])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_fusions_keep_method_members_and_settings_in_every_format(fused_results, tmp_path, monkeypatch):
    markdown = _report(fused_results, "--format", "markdown").splitlines()[0]
    columns = [cell.strip() for cell in markdown.strip("|").split(" | ")][1:]
    assert sorted(columns) == sorted(EXPECTED)  # the same labels, in the same order, in every format below
    latex = next(
        line for line in _report(fused_results, "--format", "latex").splitlines() if line.startswith("dataset")
    )
    assert [cell.strip() for cell in latex.removesuffix(r"\\").split(" & ")][1:] == columns
    header = next(csv.reader(io.StringIO(_report(fused_results, "--format", "csv"))))
    assert header[1:] == columns
    assert json.loads(_report(fused_results, "--format", "json"))["columns"] == columns
    html = _report(fused_results, "--format", "html")
    data = json.loads(re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S).group(1))
    assert data["systems"] == columns and set(data["provenance"]) == set(columns)
    assert 'split("/")' not in html  # the page shows the labels as given, never cuts them itself
    # The plot's legend.
    import harness.reporting.comparison as comparison

    figures = []
    monkeypatch.setattr(comparison, "save_png", lambda fig, path: figures.append(fig))
    _report(fused_results, "--plot", str(tmp_path / "plot.png"))
    assert figures[0].axes[0].get_legend_handles_labels()[1] == columns
    assert all(_balanced(label) for label in EXPECTED)


def test_inspect_and_compare_show_the_same_labels(fused_results):
    fusion = sorted((fused_results / "tiny" / "fusion").glob("test.*.json"))
    wsums = [path for path in fusion if json.loads(path.read_text())["config"]["fusion"]["method"] == "wsum"]
    inspected = invoke(["inspect", *map(str, wsums), "--metric", "nDCG@5"])
    assert inspected.exit_code == 0, inspected.output
    assert "wsum(bm25, all-MiniLM-L6-v2; 0.3:0.7, zscore)" in inspected.stdout
    assert "wsum(bm25, all-MiniLM-L6-v2; 0.7:0.3)" in inspected.stdout
    assert all(_balanced(line) for line in inspected.stdout.splitlines())  # never a member cut off from its fusion
    compared = invoke(["compare", *map(str, wsums), "--rounds", "100"])
    assert compared.exit_code == 0, compared.output
    shown = [line.split("  (")[0][4:] for line in compared.stdout.splitlines()[:2]]  # "A = label  (file)"
    assert sorted(shown) == ["wsum(bm25, all-MiniLM-L6-v2; 0.3:0.7, zscore)", "wsum(bm25, all-MiniLM-L6-v2; 0.7:0.3)"]


def test_bench_takes_a_label_per_system(tiny_beir, tmp_path, monkeypatch, fake_encoder):
    fake_encoder.name = MINILM
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    out = tmp_path / "results"
    result = invoke(
        [
            "-q",
            "bench",
            "--systems",
            f"lex=bm25, dense={MINILM}, hybrid=rrf(bm25, {MINILM})",
            "--datasets",
            str(tiny_beir),
            "--output-dir",
            str(out),
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split() == ["nDCG@10", "lex", "dense", "hybrid"]
    header = next(csv.reader(io.StringIO(_report(out, "--format", "csv"))))
    assert sorted(header[1:]) == ["dense", "hybrid", "lex"]
    assert {row["label"] for row in csv.DictReader(open(out / "results.csv"))} == {"lex", "dense", "hybrid"}


def test_fuse_takes_the_weights_as_bench_writes_them(tiny_beir, tmp_path):
    out = tmp_path / "results"
    for model in ("bm25", "hash:64"):
        assert invoke(["-q", "evaluate", str(tiny_beir), "--model", model, "--output-dir", str(out)]).exit_code == 0
    inputs = [str(out / "tiny" / "bm25" / "test.json"), str(out / "tiny" / "hash_64" / "test.json")]
    labels = []
    for weights in ("0.3:0.7", "0.3,0.7"):  # bench's syntax, and the older comma form fuse still reads
        fused = invoke(
            [
                "fuse",
                *inputs,
                "--method",
                "wsum",
                "--weights",
                weights,
                "--norm",
                "zscore",
                "--output-dir",
                str(out),
                "--json",
            ],
        )
        assert fused.exit_code == 0, fused.output
        data = json.loads(fused.stdout)
        assert data["config"]["fusion"]["weights"] == [0.3, 0.7]
        labels.append(data["label"])
    assert labels == ["wsum(bm25, hash:64; 0.3:0.7, zscore)"] * 2


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "systems, message",
    [
        ("=bm25", "no label before the '='"),
        ("a=b=c", "more than one '=' outside parentheses"),
        ("a=", "no system after the '='"),
        ("hybrid=rrf(bm25, x", "is never closed"),
        ("a)=bm25", "a ')' closes nothing"),
        ("a]=bm25", "a ']' closes nothing"),
    ],
    ids=["empty-label", "two-equals", "empty-system", "unclosed-parenthesis", "stray-parenthesis", "stray-bracket"],
)
def test_a_bad_label_syntax_is_one_line_and_writes_nothing(tmp_path, systems, message):
    out = tmp_path / "results"
    result = invoke(["bench", "--systems", systems, "--datasets", "tiny", "--output-dir", str(out)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()


def test_two_systems_with_one_label_are_refused_naming_both(tmp_path):
    out = tmp_path / "results"
    result = invoke(["bench", "--systems", "a=bm25, a=hash:64", "--datasets", "tiny", "--output-dir", str(out)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "'bm25' and 'hash:64' are both labelled 'a'" in result.stderr
    assert '--systems "a=bm25, b=hash:64"' in result.stderr
    assert not out.exists()
    taken = invoke(
        ["bench", "--systems", "bm25=hash:64, bm25", "--datasets", "tiny", "--output-dir", str(out)]
    )  # a label that is another system's name
    assert taken.exit_code == 2 and "both labelled 'bm25'" in taken.stderr and not out.exists()


def test_one_label_on_two_results_of_a_table_is_noted_naming_both(tiny_beir, tmp_path):
    out = tmp_path / "results"
    for model in ("bm25", "hash:64"):
        assert (
            invoke(
                ["-q", "evaluate", str(tiny_beir), "--model", model, "--name", "mine", "--output-dir", str(out)]
            ).exit_code
            == 0
        )
    report = invoke(["report", str(out)])
    assert report.exit_code == 0, report.output
    note = next(line for line in report.stdout.splitlines() if "labelled 'mine'" in line)
    assert "bm25/test.json" in note and "hash_64/test.json" in note and '--systems "a=SYSTEM, b=SYSTEM"' in note
    header = report.stdout.splitlines()[0]
    assert len({cell.strip() for cell in header.strip("|").split(" | ")[1:]}) == 2  # two columns, told apart


def test_weights_written_with_commas_in_a_bench_fusion_say_the_syntax(tmp_path):
    out = tmp_path / "results"
    result = invoke(
        ["bench", "--systems", "wsum(bm25, hash:64, weights=0.3, 0.7)", "--datasets", "tiny", "--output-dir", str(out)],
    )
    assert result.exit_code == 1 and "separate weights with ':', e.g. weights=0.3:0.7" in result.stderr, result.output
    assert not out.exists()


@pytest.mark.parametrize("name", ["rrf(bm25", "x]", " "])
def test_fuse_refuses_a_name_with_an_unbalanced_bracket(tmp_path, name):
    result = invoke(["fuse", "a.json", "b.json", "--name", name, "--output-dir", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--name" in result.stderr, result.output
    assert not (tmp_path / "o").exists()


def _result(model: str, label: str, dataset: str = "d", config: dict | None = None, config_hash: str = ""):
    from harness.reporting.report import Result

    return Result(
        dataset,
        "test",
        model,
        {"nDCG@10": 0.5},
        {},
        1,
        config or {},
        {},
        {},
        {},
        "",
        label=label,
        config_hash=config_hash or model,
    )


def test_model_names_that_would_show_alike_keep_their_full_labels():
    from harness.reporting.labels import column_labels

    results = [
        _result("BAAI/bge-small", "BAAI/bge-small"),
        _result("me/bge-small", "me/bge-small"),
        _result("intfloat/e5", "intfloat/e5 [dim128 binary]"),
        _result("bm25", "bm25 >> ms-marco-MiniLM@100"),
        # A fusion written before members' models were recorded: its members' labels name them.
        _result("fusion", "rrf(bm25, intfloat/e5)", config={"inputs": [{"label": "bm25"}, {"label": "intfloat/e5"}]}),
    ]
    kept, labels = column_labels(results, [])
    assert [labels[id(r)] for r in kept] == [
        "BAAI/bge-small",
        "me/bge-small",
        "e5 [dim128 binary]",
        "bm25 >> ms-marco-MiniLM@100",
        "rrf(bm25, e5)",
    ]


# A fused label names every setting that can change the fused run.
#
# The reference is a brute-force loop over the settings written here, not the label code: two fusions whose
# effective settings differ must get different labels, and the defaults must add nothing.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


METHODS = ("rrf", "combsum", "combmnz", "wsum", "dbsf")
USES_NORM = {"combsum", "combmnz", "wsum"}


def effective(method, norm, weights, rrf_k, depth):
    """What the fused run depends on (the module docstring's definitions): norm for the normalizing
    methods, weights for wsum, k for rrf, depth for all."""
    return (
        method,
        norm if method in USES_NORM else None,
        weights if method == "wsum" else None,
        rrf_k if method == "rrf" else None,
        depth,
    )


def specs():
    for method, norm, rrf_k, depth in itertools.product(
        METHODS, ("minmax", "zscore", "none"), (60, 20, 0), (1000, 100, 1)
    ):
        for weights in (None, (0.3, 0.7), (0.7, 0.3), (1.0, 1.0)) if method == "wsum" else (None,):
            yield (
                FusionSpec(method=method, norm=norm, weights=weights, rrf_k=rrf_k, depth=depth),
                effective(method, norm, weights, rrf_k, depth),
            )


def test_fusions_that_can_differ_never_share_a_label():
    by_label = {}
    for spec, settings in specs():
        label = spec.label(["bm25", "e5"])
        by_label.setdefault(label, set()).add(settings)
    shared = {label: s for label, s in by_label.items() if len(s) > 1}
    assert not shared


@pytest.mark.parametrize("method", METHODS)
def test_the_default_settings_add_nothing_to_the_label(method):
    assert FusionSpec(method=method).label(["bm25", "e5"]) == f"{method}(bm25, e5)"


@pytest.mark.parametrize(
    "spec, expected",
    [
        (FusionSpec(method="rrf", rrf_k=20), "rrf(bm25, e5; k=20)"),
        (FusionSpec(method="rrf", depth=100), "rrf(bm25, e5; depth=100)"),
        (FusionSpec(method="rrf", rrf_k=0, depth=1), "rrf(bm25, e5; k=0, depth=1)"),
        (FusionSpec(method="combsum", norm="zscore"), "combsum(bm25, e5; zscore)"),
        (FusionSpec(method="combmnz", norm="none"), "combmnz(bm25, e5; norm=none)"),
        (
            FusionSpec(method="wsum", weights=(0.3, 0.7), norm="zscore", depth=10),
            "wsum(bm25, e5; 0.3:0.7, zscore, depth=10)",
        ),
        (FusionSpec(method="wsum", weights=(0.1 + 0.2, 1.0)), "wsum(bm25, e5; 0.30000000000000004:1)"),
        (FusionSpec(method="dbsf", norm="zscore"), "dbsf(bm25, e5)"),
        (FusionSpec(method="dbsf", rrf_k=5), "dbsf(bm25, e5)"),
    ],
)
def test_each_non_default_setting_is_written_once(spec, expected):
    assert spec.label(["bm25", "e5"]) == expected


def test_a_weight_reads_back_exactly_from_its_label():
    for weight in (0.3, 0.1 + 0.2, 1 / 3, 2.0, 1e-7, 123456789.0):
        label = FusionSpec(method="wsum", weights=(weight, 1.0)).label(["a", "b"])
        written = label.split("; ", 1)[1].split(":", 1)[0]
        assert float(written) == weight


@pytest.mark.parametrize(
    "spec, config",
    [
        (FusionSpec(), {"method": "rrf", "rrf_k": 60, "depth": 1000}),
        (FusionSpec(method="rrf", norm="zscore", rrf_k=5, depth=7), {"method": "rrf", "rrf_k": 5, "depth": 7}),
        (FusionSpec(method="combsum", norm="zscore"), {"method": "combsum", "norm": "zscore", "depth": 1000}),
        (FusionSpec(method="combmnz", rrf_k=5), {"method": "combmnz", "norm": "minmax", "depth": 1000}),
        (
            FusionSpec(method="wsum", weights=(0.3, 0.7), norm="none", depth=10),
            {"method": "wsum", "norm": "none", "weights": [0.3, 0.7], "depth": 10},
        ),
        (FusionSpec(method="wsum"), {"method": "wsum", "norm": "minmax", "depth": 1000}),
        (FusionSpec(method="dbsf", norm="zscore"), {"method": "dbsf", "depth": 1000}),
    ],
)
def test_the_recorded_settings_are_those_the_method_uses(spec, config):
    assert spec.to_config() == config


def test_fusions_that_can_differ_never_share_a_recorded_configuration():
    by_config = {}
    for spec, settings in specs():
        by_config.setdefault(repr(sorted(spec.to_config().items())), set()).add(settings)
    assert all(len(s) == 1 for s in by_config.values())


# The rules of `harness.reporting.labels` a user sees.
#
# Every expected label and message is written out here by hand, or made by a brute-force rule written here
# (a bracket balancer, a path splitter, a newest-per-configuration loop); none comes from the labels code.
# Results are built directly (no fixture of conftest.py: this file runs with ``--noconftest``).


def result(model="bm25", label="", *, inputs=None, config_hash="", created="", path=None, dataset="tiny"):
    return Result(
        dataset=dataset,
        split="test",
        model=model,
        metrics={"nDCG@10": 0.5},
        per_query={},
        n_queries=1,
        config={"inputs": inputs} if inputs is not None else {},
        fingerprints={},
        timings={},
        versions={},
        created=created,
        config_hash=config_hash,
        label=label,
        path=Path(path) if path else None,
    )


def refusal(label: str) -> str:
    with pytest.raises(HarnessError) as caught:
        check_label(label)
    return str(caught.value)


# -- check_label: what a user typing --name sees --------------------------------------------------------------


def balanced_by_hand(text: str) -> tuple[bool, str]:
    """(balanced, the message's tail) by a brute-force rule: repeatedly delete an adjacent matched pair of
    brackets (after dropping every other character); a closer left before any opener closes nothing."""
    brackets = "".join(c for c in text if c in "()[]{}")
    while any(pair in brackets for pair in ("()", "[]", "{}")):
        for pair in ("()", "[]", "{}"):
            brackets = brackets.replace(pair, "")
    return not brackets, brackets


@pytest.mark.parametrize(
    "label",
    [
        "f(a)",
        "[hnsw]",
        "{x}",
        "rrf(bm25, e5 [hnsw onnx-int8]; k={20})",
        "XLM-R (large)",  # a capital X is a letter, not a bracket
        "XGBoost [v2]",
    ],
)
def test_a_balanced_label_is_taken_as_written(label):
    assert balanced_by_hand(label)[0]
    assert check_label(f"  {label} ") == label


@pytest.mark.parametrize(
    "label, closer",
    [("a)", ")"), ("a]", "]"), ("a}", "}"), ("(a]", "]"), ("[a)", ")"), ("{a)", ")"), ("(a}", "}"), ("f(a))", ")")],
)
def test_a_closer_without_its_opener_is_refused_naming_it(label, closer):
    assert not balanced_by_hand(label)[0]
    assert refusal(label) == f"label {label!r}: a {closer!r} closes nothing; balance its brackets"


@pytest.mark.parametrize("label, opener", [("(a", "("), ("[a", "["), ("{a", "{"), ("f(a [b]", "(")])
def test_an_opener_never_closed_is_refused_naming_it(label, opener):
    assert balanced_by_hand(label) == (False, opener)
    assert refusal(label) == f"label {label!r}: a {opener!r} is never closed; balance its brackets"


@pytest.mark.parametrize("label", ["a\nb", "a\rb", "a\r\nb"])
def test_a_line_break_is_refused(label):
    assert refusal(label) == f"label {label!r} holds a line break; give a one-line label"


@pytest.mark.parametrize("label", ["", "   ", "\t"])
def test_an_empty_label_is_refused(label):
    assert refusal(label) == f"label {label!r} is empty; give a name, e.g. hybrid"


# -- display_label: model names shortened where they stand whole ----------------------------------------------


def short_by_hand(name: str) -> str:
    """A scheme prefix (``run:``, ``openai:``) kept; the last of two or more path components; else as given."""
    head = ""
    if ":" in name and not name.split(":", 1)[1].startswith("//") and name[0].isalpha() and name[0].islower():
        scheme = name.split(":", 1)[0]
        if all(c.islower() or c.isdigit() or c in "+-" for c in scheme):
            head, name = scheme + ":", name.split(":", 1)[1]
            parts = [p for p in name.replace("\\", "/").split("/") if p]
            return head + parts[-1] if len(parts) > 1 else head + name
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    return parts[-1] if len(parts) > 1 else name


@pytest.mark.parametrize(
    "model, shown",
    [
        ("run:out/x.trec", "run:x.trec"),
        ("run:results/bm25/test.trec", "run:test.trec"),
        ("openai:org/text-embedding-3-small", "openai:text-embedding-3-small"),
        ("./models/m/", "m"),
        ("org/sub/model", "model"),
        ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
        ("checkpoint/", "checkpoint/"),  # one component: nothing to cut, shown as given
        ("/e5", "/e5"),
        ("bm25", "bm25"),
    ],
)
def test_a_model_is_shown_by_its_last_path_component_keeping_its_scheme(model, shown):
    assert short_by_hand(model) == shown
    assert display_label(result(model=model)) == shown


def test_a_fusion_named_after_a_member_model_shows_it_short():
    # a fusion named with --name after its members; member 1's own label is a --name too, so only its
    # recorded model names "org/e5"
    fused = result(
        model="fusion",
        label="org/e5 + bm25",
        inputs=[{"model": "org/e5", "label": "tuned"}, {"model": "bm25", "label": "bm25"}],
    )
    assert display_label(fused) == "e5 + bm25"


def test_an_older_fusion_takes_the_first_word_of_each_members_label_as_its_model():
    # fusions written before members' models were recorded: only the first word of a member's label is a
    # model name; a later word (a --name's second word) is shown as written
    named = result(model="fusion", label="org/e5 + bm25", inputs=[{"label": "org/e5 [hnsw]"}, {"label": "bm25"}])
    assert display_label(named) == "e5 + bm25"
    worded = result(
        model="fusion", label="rrf(bm25, mine data/v2)", inputs=[{"label": "bm25"}, {"label": "mine data/v2"}]
    )
    assert display_label(worded) == "rrf(bm25, mine data/v2)"


def test_a_member_name_that_begins_with_another_members_name_is_shortened_whole():
    # "models/e5" begins "models/e5+ft/final": the longer name is shortened first, whole, never half
    fused = result(
        model="fusion",
        label="rrf(models/e5, models/e5+ft/final)",
        inputs=[{"model": "models/e5", "label": "models/e5"}, {"model": "models/e5+ft/final", "label": "x"}],
    )
    assert display_label(fused) == "rrf(e5, final)"


# -- column_labels: one column per configuration, the newest of each --------------------------------------------


def newest_by_hand(results):
    """The newest result of each configuration (hash, else file), by a loop: a result without a time is the
    oldest; of two with the same time, the later listed."""
    best = {}
    for r in results:
        key = r.config_hash or r.where
        if key not in best or (r.created or "") >= (best[key].created or ""):
            best[key] = r
    return best


def test_copies_of_one_configuration_show_the_newest_and_say_so():
    old = result(config_hash="aaaa1111bbbb2222", created="2024-01-01T00:00:00", path="/r/old/test.json")
    new = result(config_hash="aaaa1111bbbb2222", created="2024-06-01T00:00:00", path="/r/new/test.json")
    undated = result(config_hash="aaaa1111bbbb2222", created="", path="/r/undated/test.json")
    for order in ([old, new, undated], [new, old, undated], [undated, new, old], [new, undated, old]):
        notes: list[str] = []
        kept, labels = column_labels(order, notes)
        assert list(newest_by_hand(order).values()) == [new]
        assert kept == [new]
        assert labels == {id(new): "bm25"}
        assert notes == ["tiny × bm25: 3 results of 1 configuration(s); the newest of each is shown (/r/new/test.json)"]


def test_two_configurations_found_twice_each_are_both_named_in_the_note():
    a1 = result(config_hash="a" * 16, created="2024-01-01", path="/r/a1.json")
    a2 = result(config_hash="a" * 16, created="2024-02-01", path="/r/a2.json")
    b1 = result(config_hash="b" * 16, created="2024-03-01", path="/r/b1.json")
    notes: list[str] = []
    kept, _ = column_labels([a1, a2, b1], notes)
    assert kept == [a2, b1]
    assert notes[0] == (
        "tiny × bm25: 3 results of 2 configuration(s); the newest of each is shown (/r/a2.json, /r/b1.json)"
    )


def test_results_without_a_hash_are_told_apart_by_their_file():
    one, two = result(path="/r/one.json", created="2024-01-01"), result(path="/r/two.json", created="2024-01-01")
    notes: list[str] = []
    kept, labels = column_labels([one, two], notes)
    assert kept == [one, two]
    assert [labels[id(one)], labels[id(two)]] == ["bm25 #/r/one.j", "bm25 #/r/two.j"]


def test_one_result_a_label_gets_no_hash_and_no_note():
    notes: list[str] = []
    only = result(config_hash="0123456789abcdef", path="/r/only.json")
    other = result(model="org/e5", config_hash="fedcba9876543210", path="/r/e5.json")
    kept, labels = column_labels([only, other], notes)
    assert kept == [only, other]
    assert labels == {id(only): "bm25", id(other): "e5"}
    assert notes == []


def test_different_configurations_under_one_label_get_their_hash_and_a_note_with_the_fix():
    x = result(config_hash="0123456789abcdef", path="/r/x/test.json", label="mine")
    y = result(config_hash="fedcba9876543210", path="/r/y/test.json", label="mine")
    notes: list[str] = []
    kept, labels = column_labels([x, y], notes)
    assert kept == [x, y]
    assert labels == {id(x): "mine #01234567", id(y): "mine #fedcba98"}
    assert notes == [
        "tiny: 2 different systems are labelled 'mine' (/r/x/test.json as 'mine #01234567', /r/y/test.json as "
        "'mine #fedcba98'); give each its own label (bench --systems \"a=SYSTEM, b=SYSTEM\", or evaluate/fuse --name)"
    ]


def test_two_fusions_whose_short_labels_would_clash_keep_their_stored_labels():
    # rrf(a/m) and rrf(b/m) both shorten to rrf(m): two columns must never share a label
    a = result(model="fusion", label="rrf(a/m)", inputs=[{"model": "a/m", "label": "a/m"}], config_hash="1" * 16)
    b = result(model="fusion", label="rrf(b/m)", inputs=[{"model": "b/m", "label": "b/m"}], config_hash="2" * 16)
    c = result(model="fusion", label="rrf(c/n)", inputs=[{"model": "c/n", "label": "c/n"}], config_hash="3" * 16)
    _, labels = column_labels([a, b, c], [])
    assert labels == {id(a): "rrf(a/m)", id(b): "rrf(b/m)", id(c): "rrf(n)"}


HASH_SYSTEMS = "bm25, hash:64, rrf(bm25, hash:64), hy=wsum(bm25, hash:64, weights=0.3:0.7)"
HASH_LABELS = ["bm25", "hash:64", "rrf(bm25, hash:64)", "hy"]  # what a reader should see, written by hand


def test_a_fusion_and_a_labelled_system_are_named_by_label_in_every_table_and_message(tiny_beir, tmp_path):
    """Report (Markdown, CSV), compare, fuse and pool name each system by its label: never its TREC run tag
    (``rrf(bm25,_hash:64)``: a tag holds no spaces) nor its file's name."""
    out = tmp_path / "results"
    bench = invoke(["-q", "bench", "--systems", HASH_SYSTEMS, "--datasets", str(tiny_beir), "--output-dir", str(out)])
    assert bench.exit_code == 0, bench.output
    markdown = _report(out, "--format", "markdown").splitlines()[0]
    assert sorted(cell.strip() for cell in markdown.strip("|").split(" | ")[1:]) == sorted(HASH_LABELS)
    assert sorted(next(csv.reader(io.StringIO(_report(out, "--format", "csv"))))[1:]) == sorted(HASH_LABELS)
    fusions = {json.loads(p.read_text())["label"]: p for p in (out / "tiny" / "fusion").glob("test.*.json")}
    compared = invoke(["compare", str(fusions["rrf(bm25, hash:64)"]), str(fusions["hy"]), "--rounds", "100"])
    assert compared.exit_code == 0, compared.output
    assert [line.split("  (")[0] for line in compared.stdout.splitlines()[:2]] == ["A = rrf(bm25, hash:64)", "B = hy"]
    rrf_run = fusions["rrf(bm25, hash:64)"].with_name(fusions["rrf(bm25, hash:64)"].stem + ".run.trec")
    assert rrf_run.read_text().split()[5] == "rrf(bm25,_hash:64)"  # the tag the TREC format allows
    hash_run = out / "tiny" / "hash_64" / "test.run.trec"
    fused = invoke(["fuse", str(rrf_run), str(hash_run), "--out", str(tmp_path / "fused.trec")])
    assert fused.exit_code == 0, fused.output
    assert "(rrf(bm25, hash:64), hash:64)" in fused.output and "rrf(rrf(bm25, hash:64), hash:64)" in fused.output
    pooled = invoke(
        ["pool", str(tiny_beir), "--runs", str(rrf_run), "--runs", str(hash_run), "--out", str(tmp_path / "p")]
    )
    assert pooled.exit_code == 0, pooled.output
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert [system["name"] for system in manifest["systems"]] == ["rrf(bm25, hash:64)", "hash:64"]
    assert "_hash" not in fused.output + pooled.output


@pytest.mark.parametrize(
    "label",
    [
        "rrf(bm25, hash:64)",
        "wsum(bm25, e5; 0.3:0.7, zscore)",
        "rrf(bm25 >> ce@10, wsum(a, b; 0.5:0.5); k=20, depth=100)",
        "bm25 >> cross-encoder/ms-marco-MiniLM-L-6-v2@100",
        "my_model",
        "run:out/a_b.trec",
    ],
)
def test_a_run_tag_reads_back_as_the_label_it_was_written_from(label):
    from harness.reporting.labels import tag_label

    assert tag_label("_".join(label.split())) == label  # the TREC writer's rule: whitespace → "_"
