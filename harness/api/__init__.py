"""The Python API: what ``from harness import ...`` gives (loaded lazily by `harness.__getattr__`).

    from harness import evaluate, score, judge, read_qrels, read_run, Qrels, Run, EvaluateConfig

`evaluate` runs the pipeline on a dataset and returns its `Result`; `score` scores any run against any
qrels with the evaluation rules of `harness.evaluation.metrics` (trec_eval exact); `judge` grades a pool
with an LLM (`harness.judging.llm`). The command line is a thin layer over the same functions: each command
calls one of them and prints what it returns (docs/python-api.md).

One module per command family: `running` (evaluate, retrieve, bench, demo, crosscheck), `scoring` (score),
`data` (convert, validate, datasets), `results` (report, compare, fuse, export, inspect), `judging` (pool,
judge, judgments), `machine` (env, cache); `settings` holds what they share, the one builder of an
`EvaluateConfig` from flat settings among it; `choices` the registries' names the command line offers. Each
name loads its module on first use, and heavy modules load inside each function, so `from harness import score`
stays light and a command's --help loads no family but its own.
"""

import importlib

# Where each name lives. Nothing is imported here: a name loads its module the first time it is asked for
# (`__getattr__` below), as `harness.__getattr__` loads this package, so a command's --help (which imports
# `harness.api.choices`) loads no other family, and `from harness.api import score` loads `scoring` alone.
_FAMILIES = {
    "harness.api.data": (
        "convert",
        "coverage",
        "download_dataset",
        "import_dataset",
        "list_datasets",
        "remove_dataset",
        "validate",
    ),
    "harness.api.judging": ("agreement", "judge", "merge_judgments", "pool", "pool_status"),
    "harness.api.machine": ("cache_entries", "cache_size", "clear_cache", "environment", "prune_cache"),
    "harness.api.quality": ("judge_sample", "pool_check", "pool_on_budget", "rankings", "reusability"),
    "harness.api.results": (
        "Comparison",
        "check_published",
        "compare",
        "compression",
        "cost",
        "export",
        "frontier",
        "fuse",
        "fuse_runs",
        "inspect_results",
        "read_results",
        "report",
        "report_page",
        "resolution",
    ),
    "harness.api.running": ("EvaluateConfig", "bench", "crosscheck", "demo", "evaluate", "retrieve"),
    # DEFAULT_METRICS: the command line's default; the builder and the metric check: the command line's too.
    "harness.api.scoring": ("DEFAULT_METRICS", "score"),
    "harness.api.settings": ("evaluate_config", "result_metric", "third_party_bars"),
    "harness.io.formats": ("read_qrels", "read_run"),
    "harness.records": ("Qrels", "Result", "Run"),
}
_HOME = {name: module for module, names in _FAMILIES.items() for name in names}


def __getattr__(name: str):
    if name not in _HOME:
        # Not a lazy name: `from harness.api import choices` then imports the submodule.
        raise AttributeError(f"module 'harness.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # loaded once; `monkeypatch.setattr(harness.api, name, ...)` replaces it as before
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])


__all__ = [
    "EvaluateConfig",
    "Qrels",
    "Result",
    "Run",
    "evaluate",
    "judge",
    "pool_status",
    "read_qrels",
    "read_run",
    "score",
]
# The other commands (docs/python-api.md).
__all__ += [
    "Comparison",
    "agreement",
    "bench",
    "cache_entries",
    "cache_size",
    "check_published",
    "clear_cache",
    "compare",
    "compression",
    "convert",
    "cost",
    "coverage",
    "crosscheck",
    "demo",
    "environment",
    "download_dataset",
    "export",
    "frontier",
    "fuse",
    "fuse_runs",
    "import_dataset",
    "inspect_results",
    "list_datasets",
    "merge_judgments",
    "pool",
    "prune_cache",
    "read_results",
    "remove_dataset",
    "report",
    "report_page",
    "resolution",
    "retrieve",
    "third_party_bars",
    "validate",
]
# Is the eval set good enough (docs/build-an-eval-set.md).
__all__ += ["pool_check", "pool_on_budget", "rankings", "reusability", "judge_sample"]
