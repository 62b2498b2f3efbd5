"""What every command of the Python API shares: the one builder of an `EvaluateConfig` from flat settings (the
command line's options and `evaluate`'s keywords alike), the metric name of a saved result, results given as
objects or files, and Hugging Face's own progress bars.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, setting
from harness.evaluation.metrics import parse_metric
from harness.pipeline.evaluate import EvaluateConfig
from harness.records import Result

# The flat settings of each nested spec of an `EvaluateConfig` (the command line's options), and the field of the
# spec each one sets. A flat setting left out (or None where None is not a value) takes the spec's default.
INDEX_SETTINGS = {
    "index_kind": "kind",
    "hnsw_m": "hnsw_m",
    "ef_construction": "ef_construction",
    "ef_search": "ef_search",
    "nlist": "nlist",
    "nprobe": "nprobe",
    "pq_m": "pq_m",
    "pq_nbits": "pq_nbits",
}
RAY_SETTINGS = {
    "ray_address": "address",
    "ray_local": "local_cpus",
    "shards": "shards",
    "ray_gpus_per_worker": "gpus_per_worker",
    "ray_search": "search",
}
RERANK_SETTINGS = {
    "rerank_model": "model",
    "rerank_depth": "depth",
    "rerank_batch_size": "batch_size",
    "rerank_max_length": "max_length",
    "rerank_backend": "backend",
}
ENCODER_SETTINGS = {
    name: name for name in ("max_seq_length", "backend", "precision", "batch_size", "trust_remote_code", "probe")
}
PREFIX_SETTINGS = ("query_prefix", "doc_prefix")
NORMALIZE_SETTINGS = ("similarity", "normalize")
COMPRESSION_SETTINGS = {name: name for name in ("truncate_dim", "embedding_precision", "rescore_multiplier")}
ENDPOINT_SETTINGS = {
    "endpoint": "url",
    "api_key_env": "api_key_env",
    "endpoint_batch_size": "batch_size",
    "concurrency": "concurrency",
    "endpoint_timeout": "timeout",
    "price_per_1m_tokens": "price_per_1m_tokens",
}
# Flat settings named otherwise than the field they set.
RENAMED = {"use_cache": "cache"}
PASSAGE_SETTINGS = ("passage_score",)  # how `passages` scores a document; `passages` may be WINDOW[:STRIDE] text
CANDIDATE_SETTINGS = ("candidates_depth",)  # ``candidates`` itself is the `EvaluateConfig` field (text or spec)
FLAT_SETTINGS = (
    *CANDIDATE_SETTINGS,
    *PASSAGE_SETTINGS,
    *INDEX_SETTINGS,
    *RAY_SETTINGS,
    *RERANK_SETTINGS,
    *ENCODER_SETTINGS,
    *PREFIX_SETTINGS,
    *NORMALIZE_SETTINGS,
    *COMPRESSION_SETTINGS,
    *ENDPOINT_SETTINGS,
    *RENAMED,
)


def _usage_error(message: str) -> HarnessError:
    """A setting that cannot go with another: the command line's mistake (exit 2), named by its settings."""
    error = HarnessError(message)
    error.usage = True
    return error


def _taken(settings: dict[str, Any], names: Mapping[str, str] | Iterable[str]) -> dict[str, Any]:
    """The flat settings among `names` (consumed from `settings`), by the field each sets."""
    mapping = names if isinstance(names, Mapping) else {name: name for name in names}
    return {mapping[name]: settings.pop(name) for name in list(mapping) if name in settings}


def _nested(settings: dict[str, Any], field_name: str, flat: Mapping[str, str], build) -> None:
    """Set `field_name` from its flat settings, unless none is given; refuse both the spec and its flat settings."""
    given = [name for name in flat if name in settings]
    if not given:
        return
    if field_name in settings:
        raise HarnessError(f"give either {setting(field_name)} or {setting(given[0])}, not both")
    settings[field_name] = build(_taken(settings, flat))


def _encoder(settings: dict[str, Any]) -> None:
    """`encoder` from the flat model settings: the prompts given (even '' turns the registry's off), normalizing."""
    from harness.runtimes.spec import PROMPTS_GIVEN, EncoderSpec

    given = [name for name in (*ENCODER_SETTINGS, *PREFIX_SETTINGS, *NORMALIZE_SETTINGS) if name in settings]
    if not given:
        return
    if "encoder" in settings:
        raise HarnessError(f"give either {setting('encoder')} or {setting(given[0])}, not both")
    similarity, normalize = settings.pop("similarity", "cosine"), settings.pop("normalize", None)
    if normalize is None:
        normalize = similarity == "cosine"
    elif similarity == "cosine" and not normalize:
        raise _usage_error("`similarity` cosine needs `normalize` on; use `similarity` dot for unnormalized vectors")
    prefixes = {name: settings.pop(name, None) for name in PREFIX_SETTINGS}
    given_prompts = any(value is not None for value in prefixes.values())
    settings["encoder"] = EncoderSpec(
        normalize=normalize,
        **{name: value or "" for name, value in prefixes.items()},
        prompt_source=PROMPTS_GIVEN if given_prompts else "",
        **_taken(settings, ENCODER_SETTINGS),
    )


def _rerank(settings: dict[str, Any]) -> None:
    """`rerank` from the flat rerank settings: a cross-encoder only when a model is named (the rest then apply)."""
    from harness.retrieval.rerank import RerankSpec

    given = [name for name in RERANK_SETTINGS if name in settings]
    if not given:
        return
    if "rerank" in settings:
        raise HarnessError(f"give either {setting('rerank')} or {setting(given[0])}, not both")
    values = _taken(settings, RERANK_SETTINGS)
    settings["rerank"] = RerankSpec(**values) if values.get("model") else None


def _ray(settings: dict[str, Any]) -> None:
    from harness.engines.ray_engine import RaySpec

    _nested(settings, "ray", RAY_SETTINGS, lambda values: RaySpec(**values))
    if settings.get("engine", "local") != "ray" and settings.get("ray", RaySpec()) != RaySpec():
        raise _usage_error(
            f"{', '.join(setting(name) for name in list(RAY_SETTINGS)[:-1])} and {setting('ray_search')} "
            f"need {setting('engine')} ray"
        )


def _passages(settings: dict[str, Any]) -> None:
    """`passages` as a `PassageSpec`: ``WINDOW[:STRIDE]`` text parsed, scored by ``passage_score`` (maxp)."""
    from harness.retrieval.index.passages import PassageSpec, parse_passages

    score = settings.pop("passage_score", None)
    spec = settings.get("passages")
    if spec is None:
        if score not in (None, "maxp"):
            raise _usage_error(f"{setting('passage_score')} {score} scores passages; give {setting('passages')} too")
        return
    try:
        spec = spec if isinstance(spec, PassageSpec) else parse_passages(str(spec))
        settings["passages"] = replace(spec, score=score) if score is not None else spec
        settings["passages"].check()
    except HarnessError as exc:
        raise _usage_error(str(exc)) from None


def _candidates(settings: dict[str, Any]) -> None:
    """`candidates` as a `CandidateSpec`: a run file or a system (text), ``candidates_depth`` documents per query."""
    from harness.retrieval.rerank import CANDIDATES_DEPTH, CandidateSpec

    depth = settings.pop("candidates_depth", None)
    spec = settings.get("candidates")
    if spec is None:
        if depth is not None:
            raise _usage_error(
                f"{setting('candidates_depth')} is the depth of a candidate set; give {setting('candidates')} too"
            )
        return
    if not isinstance(spec, CandidateSpec):
        spec = CandidateSpec(str(spec), CANDIDATES_DEPTH)
    settings["candidates"] = replace(spec, depth=depth) if depth is not None else spec


def evaluate_config(dataset: str | Path | None, model: str | None, settings: Mapping[str, Any]) -> EvaluateConfig:
    """The one `EvaluateConfig` builder: from `EvaluateConfig` fields and flat settings alike.

    The flat settings are the command line's options by their names (``index_kind``, ``hnsw_m``, ``backend``,
    ``query_prefix``, ``similarity``, ``rerank_model``, ``ray_address``, ``endpoint`` as a URL, ``use_cache``,
    ...: `FLAT_SETTINGS`); each builds the nested spec it belongs to (`IndexSpec`, `EncoderSpec`, ...) from that
    spec's defaults. Progress bars are off unless ``progress=True``.

    Raises:
        HarnessError: An unknown setting (the known ones listed), a spec given beside its own flat settings, or
            settings that contradict each other (``similarity`` cosine without normalizing; Ray settings without
            ``engine`` ray).
    """
    from harness.retrieval.compress import CompressionSpec
    from harness.retrieval.endpoint import EndpointSpec
    from harness.retrieval.index import IndexSpec

    settings = dict(settings)
    known = {spec.name for spec in fields(EvaluateConfig)}
    unknown = sorted(set(settings) - known - set(FLAT_SETTINGS))
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; EvaluateConfig has {', '.join(sorted(known))}")
    for flat, name in RENAMED.items():
        if flat in settings:
            settings[name] = settings.pop(flat)
    if not isinstance(settings.get("endpoint"), EndpointSpec):  # a URL (or None): the flat setting
        _nested(settings, "endpoint_spec", ENDPOINT_SETTINGS, lambda values: EndpointSpec(**values))
        if "endpoint_spec" in settings:
            settings["endpoint"] = settings.pop("endpoint_spec")
    else:
        _nested(settings, "endpoint", {k: v for k, v in ENDPOINT_SETTINGS.items() if k != "endpoint"}, None)
    _nested(settings, "index", INDEX_SETTINGS, lambda values: IndexSpec(**values))
    _nested(settings, "compression", COMPRESSION_SETTINGS, lambda values: CompressionSpec(**values))
    _ray(settings)
    _rerank(settings)
    _encoder(settings)
    _passages(settings)
    _candidates(settings)
    settings.setdefault("progress", False)
    if model is not None:
        settings["model"] = model
    return EvaluateConfig(dataset_path=dataset, **settings)


def result_metric(name: str, whole_run: str = "score()") -> str:
    """A metric name of a saved result (stored at cutoffs), in its canonical spelling.

    Args:
        name: The metric, in any spelling `parse_metric` reads.
        whole_run: What the refusal of a cutoff-less name (``map``) points to for a whole run's value.

    Raises:
        HarnessError: An unknown metric, or one without its cutoff that results store at cutoffs.
    """
    from harness.evaluation.metrics import metric_families

    spec = parse_metric(name)
    if not spec.k and metric_families()[spec.name].cutoff:
        raise HarnessError(
            f"metric {name!r} has no cutoff, and results store {spec.name} at cutoffs: write e.g. "
            f"{spec.name}@10 ({whole_run} computes {spec.name} over a whole run)"
        )
    return str(spec)


def results_of(items: Iterable[Result | str | Path] | str | Path, allow_mixed_data: bool = False) -> list[Result]:
    """Results given as `Result` objects, result files or folders (searched recursively)."""
    from harness.reporting.comparison import load_results

    items = [items] if isinstance(items, (str, Path, Result)) else list(items)
    given = [item for item in items if isinstance(item, Result)]
    paths = [item for item in items if not isinstance(item, Result)]
    return given + (load_results(paths, allow_mixed_data) if paths else [])


@contextmanager
def third_party_bars(enabled: bool = False) -> Iterator[None]:
    """Hugging Face's own progress bars (transformers' ``Loading weights``, hub downloads) on or off, for a block.

    The previous state comes back afterwards, so a caller's own choice outlives the call.

    Args:
        enabled: True leaves the bars as they are (a no-op); False turns them off inside the block.

    Returns:
        A context manager.
    """
    if enabled:
        yield
        return
    import importlib

    hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module: `utils.tqdm` is its class

    saved = dict(hub_tqdm.progress_bar_states)
    logging_module = sys.modules.get("transformers.utils.logging")
    was_on = logging_module.is_progress_bar_enabled() if logging_module else None
    hub_tqdm.disable_progress_bars()  # transformers, when first imported inside the block, starts with its bars off
    if logging_module:
        logging_module.disable_progress_bar()
    try:
        yield
    finally:
        logging_module = sys.modules.get("transformers.utils.logging")
        if was_on is None:  # imported inside the block: it would have started as the hub stood before
            was_on = saved.get("_global", True) and not hub_tqdm.HF_HUB_DISABLE_PROGRESS_BARS
        if logging_module and was_on:
            logging_module.enable_progress_bar()
        hub_tqdm.progress_bar_states.clear()
        hub_tqdm.progress_bar_states.update(saved)


def written_result(outcome) -> Result:
    """The result of a pipeline `Outcome`, carrying the file it was written to (``path``; its run file is
    ``run_path``), or none when nothing was written: what a command prints and where it wrote it, in one record."""
    return replace(outcome.result, path=outcome.paths[0]) if outcome.paths else outcome.result
