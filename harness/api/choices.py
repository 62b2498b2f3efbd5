"""The values the command line offers: each registry's names (an option's choices) and the defaults it shows, read
from the library when a command is built, never when the command line loads (`beir-harness --help` reads none).

Each is a function, so that asking for one registry loads that registry alone.
"""

from __future__ import annotations


def backends() -> tuple[str, ...]:
    """The encoder runtimes --backend (and --rerank-backend, --sparse-backend) take, auto included."""
    from harness.runtimes.registry import CHOICES

    return tuple(CHOICES)


def default_backend() -> str:
    """The encoder runtime --backend takes when none is given (auto; `backend_env` pins another)."""
    from harness.runtimes.registry import DEFAULT_BACKEND

    return DEFAULT_BACKEND


def backend_env() -> str:
    """The environment variable that sets --backend's default (``torch`` keeps the reference)."""
    from harness.runtimes.registry import BACKEND_ENV

    return BACKEND_ENV


def reference_backend() -> str:
    """The runtime a cross-encoder or a sparse encoder runs on when none is given (torch: their CPU class table is
    not measured, and auto would probe every runtime on the pairs or the corpus)."""
    from harness.runtimes.registry import TORCH

    return TORCH


def model_precisions() -> tuple[str, ...]:
    """The precisions a model's weights and activations run in (--precision)."""
    from harness.retrieval.devices import PRECISIONS

    return tuple(PRECISIONS)


def embedding_precisions() -> tuple[str, ...]:
    """The precisions the vectors are stored and searched in (--embedding-precision)."""
    from harness.retrieval.compress import PRECISIONS

    return tuple(PRECISIONS)


def default_rescore_multiplier() -> int:
    """How many times the depth a compressed search retrieves to rescore (--rescore-multiplier)."""
    from harness.retrieval.compress import DEFAULT_RESCORE_MULTIPLIER

    return DEFAULT_RESCORE_MULTIPLIER


def index_kinds() -> tuple[str, ...]:
    """The FAISS index kinds (--index)."""
    from harness.retrieval.index import INDEX_KINDS

    return tuple(INDEX_KINDS)


def engines() -> tuple[str, ...]:
    """Where the corpus is encoded (--engine)."""
    from harness.engines import ENGINES

    return tuple(ENGINES)


def search_places() -> tuple[str, ...]:
    """Where a Ray run searches a flat index (--ray-search)."""
    from harness.engines import SEARCH_PLACES

    return tuple(SEARCH_PLACES)


def default_model() -> str:
    """The model used when none is given (--model)."""
    from harness.retrieval.models import DEFAULT_MODEL

    return DEFAULT_MODEL


def table_formats() -> tuple[str, ...]:
    """The formats a report is rendered in (report --format)."""
    from harness.reporting.tables import FORMATS

    return tuple(FORMATS)


def cost_axes() -> tuple[str, ...]:
    """The costs a result is placed by on the quality–cost frontier (report --cost-axis, --within)."""
    from harness.reporting.frontier import COSTS

    return tuple(COSTS)


def paired_tests() -> tuple[str, ...]:
    """The paired tests over queries (report --test)."""
    from harness.evaluation.resolution import TESTS

    return tuple(TESTS)


def corrections() -> tuple[str, ...]:
    """The multiple-testing corrections (report --correction)."""
    from harness.evaluation.significance import CORRECTIONS

    return tuple(CORRECTIONS)


def table_layouts() -> tuple[str, ...]:
    """The shapes of a report's table (report --layout)."""
    from harness.reporting.tables import LAYOUTS

    return tuple(LAYOUTS)


def fusion_methods() -> tuple[str, ...]:
    """The fusion methods (fuse --method)."""
    from harness.retrieval.fusion import METHODS

    return tuple(METHODS)


def passage_scores() -> tuple[str, ...]:
    """How a document's passages give its score (--passage-score)."""
    from harness.retrieval.index.passages import SCORES

    return SCORES


def fusion_norms() -> tuple[str, ...]:
    """The per-query score normalizations of a fusion (fuse --norm)."""
    from harness.retrieval.fusion import NORMS

    return tuple(NORMS)


def budget_strategies() -> tuple[str, ...]:
    """The orders in which a pool on a budget judges its pairs (pool --strategy), sorted."""
    from harness.judging.budget import STRATEGIES

    return tuple(sorted(STRATEGIES))


def merge_policies() -> tuple[str, ...]:
    """How disagreeing grades become one (judgments merge --resolve)."""
    from harness.judging.merge import POLICIES

    return tuple(POLICIES)


def merge_ties() -> tuple[str, ...]:
    """What a merge does where its policy cannot decide (judgments merge --ties)."""
    from harness.judging.merge import TIES

    return tuple(TIES)


def delimiters() -> tuple[str, ...]:
    """The names of the CSV field separators convert reads (convert --delimiter)."""
    from harness.datasets.convert.tables import DELIMITERS

    return tuple(DELIMITERS.values())
