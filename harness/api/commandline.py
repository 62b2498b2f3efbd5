"""What the command line takes from the library besides the commands: how each outcome is printed (or drawn, or
written) and how an option's value is checked as the line is parsed. Each is the library's own function, named here
so that the command line has one door, `harness.api` (`tests/test_layout.py` holds it to that); nothing here
decides anything.
"""

from harness.evaluation.metrics import metric_families, parse_k_values, parse_metric
from harness.io.cache import cache_dir
from harness.io.files import write_text
from harness.io.textcache import parse_duration
from harness.io.trec import qrels_format
from harness.judging.merge import parse_scale
from harness.judging.pool import PoolSpec, check_spec
from harness.pipeline.environment import format_bench, format_environment, format_gemm
from harness.pipeline.systems import parse_system, parse_systems, split_systems
from harness.presentation import parse_size
from harness.reporting.comparison import format_compare, plot_comparison
from harness.reporting.compression import plot_compression, render_compression
from harness.reporting.cost import cost_summary, render_cost
from harness.reporting.inspect import format_inspect
from harness.reporting.labels import check_label
from harness.reporting.report import format_metrics_table
from harness.reporting.reproduction import check_exit_code, format_checks
from harness.retrieval.fusion import parse_weights

__all__ = [
    # printing an outcome
    "check_exit_code",
    "cost_summary",
    "format_bench",
    "format_gemm",
    "format_checks",
    "format_compare",
    "format_environment",
    "format_inspect",
    "format_metrics_table",
    "plot_comparison",
    "plot_compression",
    "render_compression",
    "render_cost",
    "write_text",
    # an option's value, checked while the line is parsed (a usage error, exit 2)
    "PoolSpec",
    "cache_dir",
    "check_label",
    "check_spec",
    "metric_families",
    "parse_k_values",
    "parse_metric",
    "parse_scale",
    "parse_duration",
    "parse_size",
    "parse_system",
    "parse_systems",
    "parse_weights",
    "qrels_format",
    "split_systems",
]
