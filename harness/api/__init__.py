"""The Python API: what ``from harness import ...`` gives (loaded lazily by `harness.__getattr__`).

    from harness import evaluate, score, judge, read_qrels, read_run, Qrels, Run, EvaluateConfig

`evaluate` runs the pipeline on a dataset and returns its `Result`; `score` scores any run against any
qrels with the evaluation rules of `harness.evaluation.metrics` (trec_eval exact); `judge` grades a pool
with an LLM (`harness.judging.llm`). The command line is a thin layer over the same functions: each command
calls one of them and prints what it returns (docs/python-api.md).

One module per command family: `running` (evaluate, retrieve, bench, demo, crosscheck), `scoring` (score),
`data` (convert, validate, datasets), `results` (report, compare, fuse, export, inspect), `judging` (pool,
judge, judgments), `machine` (env, cache); `settings` holds what they share, the one builder of an
`EvaluateConfig` from flat settings among it; `choices` the registries' names the command line offers. Heavy
modules load inside each function, so `from harness import score` stays light.
"""

from harness.api.data import (
    convert,
    coverage,
    download_dataset,
    import_dataset,
    list_datasets,
    remove_dataset,
    validate,
)
from harness.api.judging import agreement, judge, merge_judgments, pool, pool_status
from harness.api.machine import cache_entries, cache_size, clear_cache, environment, prune_cache
from harness.api.quality import judge_sample, pool_check, pool_on_budget, rankings, reusability
from harness.api.results import (
    Comparison,
    check_published,
    compare,
    compression,
    cost,
    export,
    fuse,
    fuse_runs,
    inspect_results,
    read_results,
    report,
    report_page,
)
from harness.api.running import EvaluateConfig, bench, crosscheck, demo, evaluate, retrieve
from harness.api.scoring import DEFAULT_METRICS, score  # noqa: F401 - DEFAULT_METRICS: the command line's default
from harness.api.settings import (  # noqa: F401 - the builder and the metric check: the command line's too
    evaluate_config,
    result_metric,
    third_party_bars,
)
from harness.io.formats import read_qrels, read_run
from harness.records import Qrels, Result, Run

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
    "retrieve",
    "third_party_bars",
    "validate",
]
# Is the eval set good enough (docs/build-an-eval-set.md).
__all__ += ["pool_check", "pool_on_budget", "rankings", "reusability", "judge_sample"]
