"""beir-harness: honest retrieval evaluation on BEIR-format data.

    from harness import evaluate, score, judge, read_qrels, read_run, Qrels, Run, EvaluateConfig

Importing the package is cheap: those names load on first use (`harness.api`), and nothing here loads
torch, faiss, sentence-transformers or pandas. The heavy libraries are imported inside the functions
that need them.
"""

import logging

__version__ = "0.1.0"

# A library never configures logging for its user; the CLI does (see harness.cli).
logging.getLogger(__name__).addHandler(logging.NullHandler())

_API = (
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
)
# Every other command as a function (docs/python-api.md); `harness.api.__all__` lists the same names.
_API += (
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
)
# Eval-set quality (the same block at the end of `harness.api`).
_API += ("pool_check", "pool_on_budget", "rankings", "reusability", "judge_sample")


def __getattr__(name: str):
    # The API loads on first use, so `import harness` (and `beir-harness --help`) stays instant.
    if name in _API:
        from harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
