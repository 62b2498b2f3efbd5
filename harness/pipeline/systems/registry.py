"""The kinds of system: one record per kind (`KINDS`), and the one parser of a system's text (`parse_system`).

A system is what ``evaluate --model``, ``retrieve --model``, ``bench --systems`` and ``pool --systems`` name: a dense
model (a sentence-transformers name or folder), ``bm25``, the hashing stand-in ``hash:N``, an embedding service
``openai:MODEL``, a learned sparse encoder (a SparseEncoder folder), a multi-vector
model (a MultiVectorEncoder folder: late interaction), an external run ``run:FILE``, a fusion
``METHOD(SYSTEM, SYSTEM[, SETTING=VALUE ...])`` or a reranked system ``FIRST >> CROSS_ENCODER@DEPTH`` (depth 100 when
omitted); each optionally labelled ``LABEL=SYSTEM``.

`parse_system` reads the text once and returns a `System`. Its `Kind` says how the kind is recognised, the name a
result records (`Kind.model_name`), its identity (`Kind.identity`: the settings that enter the configuration hash,
and so the result file's name), whether it needs a device, is cacheable, can fan out on Ray, can be probed by
``--backend auto``, and its depth (`System.depth`). `system_of` gives the system of an `EvaluateConfig`, `configure`
the `EvaluateConfig` of a system. Nothing outside this package tests a system's text (tests/test_layout.py): it
parses it and reads the record. This module imports no other module of `harness.pipeline` (a config is read by its
fields), so every stage may import it.

A fusion's settings are ``norm=minmax|zscore|none``, ``k=60`` (RRF's k), ``weights=0.3:0.7`` (wsum, one per system,
colon-separated, as ``fuse --weights``) and ``depth=1000``; e.g. ``rrf(bm25, all-MiniLM-L6-v2)`` or ``wsum(bm25, e5,
weights=0.3:0.7, norm=zscore)``. A list of systems is comma-separated; commas inside a fusion's parentheses belong to
the fusion. A label goes before the system, up to the one ``=`` outside parentheses: ``hybrid=rrf(bm25, e5)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.reporting.labels import check_label
from harness.retrieval.endpoint import ENDPOINT_PREFIX
from harness.retrieval.fusion import METHODS, FusionSpec, parse_weights
from harness.retrieval.stand_ins import HASH_PREFIX

RUN_PREFIX = "run:"  # run:FILE: a TREC run made elsewhere, scored as it is
BM25_NAME = "bm25"  # the lexical baseline's name, in any case; the name its results record
KNOWN_NAMES = (BM25_NAME,)  # names that are no model folder, suggested beside close model names
DEFAULT_DEPTH = 100  # documents a first stage keeps per query, unless more cutoffs or a depth are asked for
RERANK_DEPTH = 100  # a rerank's depth when ``@DEPTH`` is omitted
_FUSION = re.compile(r"^\s*(?P<method>[A-Za-z]+)\s*\((?P<inner>.*)\)\s*$", re.S)
_SETTINGS = {"norm": "norm", "k": "rrf_k", "weights": "weights", "depth": "depth"}
_RERANK_HOW = "write FIRST >> CROSS_ENCODER@DEPTH, e.g. bm25 >> cross-encoder/ms-marco-MiniLM-L-6-v2@100"


# --- identities: the settings of a config that decide a first stage's numbers, beside their defaults ---------------


def _no_settings(config: Any, default: Any) -> tuple[dict, dict]:
    return {}, {}


def _bm25_settings(config: Any, default: Any) -> tuple[dict, dict]:
    from harness.retrieval.bm25 import BM25Spec

    spec = BM25Spec().to_config()  # not configurable yet
    return {"bm25": spec}, {"bm25": spec}


def _vector_settings(config: Any, default: Any) -> tuple[dict, dict]:
    settings, defaults = dict(config.encoder.to_config()), dict(default.encoder.to_config())
    settings["index"], defaults["index"] = config.index.to_config(), default.index.to_config()
    settings.update(config.compression.to_config())
    defaults.update(default.compression.to_config())
    if getattr(config, "passages", None) is not None:  # absent otherwise: a run without passages keeps its hash
        settings["passages"] = config.passages.to_config()
    return settings, defaults


def _endpoint_settings(config: Any, default: Any) -> tuple[dict, dict]:
    settings, defaults = _vector_settings(config, default)
    settings["endpoint"] = config.endpoint.where()  # one model name on two services: two results
    return settings, defaults


def _sparse_settings(config: Any, default: Any) -> tuple[dict, dict]:
    from harness.runtimes.registry import TORCH

    settings, defaults = _vector_settings(config, default)
    # torch, the default, leaves the identity of earlier results as it was
    settings["sparse_backend"], defaults["sparse_backend"] = config.sparse_backend, TORCH
    return settings, defaults


# --- recognition -------------------------------------------------------------------------------------------------


def _top_level(text: str, token: str) -> list[int]:
    """Where `token` occurs in `text` outside parentheses."""
    found, depth, i = [], 0, 0
    while i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0 and text.startswith(token, i):
            found.append(i)
            i += len(token)
            continue
        i += 1
    return found


def _late(name: str) -> Callable:
    """A rule of the multi-vector kind, kept with its search (`harness.retrieval.index.multivector`)."""
    from harness.retrieval.index import multivector

    return getattr(multivector, name)


def _is_sparse_folder(text: str) -> bool:
    from harness.retrieval.models import model_folder
    from harness.retrieval.rerank import model_kind

    return model_kind(model_folder(text)) == "sparse-encoder"


def _canonical(system: System) -> str:
    from harness.retrieval.models import canonical_model_name

    return canonical_model_name(system.model)


@dataclass(frozen=True)
class Kind:
    """One kind of system: how its text is recognised and the rules that follow from it.

    Attributes:
        name: The kind's name (``dense``, ``bm25``, ``hash``, ``endpoint``, ``sparse``, ``multi-vector``, ``run``,
            ``fusion``, ``rerank``); the first stage that runs it is looked up by it (`harness.pipeline.evaluate`).
        what: The kind in a sentence's words (``BM25``, ``a sparse encoder``), for messages.
        recognise: text (stripped, no label) → whether it is of this kind; `KINDS` are asked in order, so each sees
            only the texts the ones before it did not take.
        model_name: `System` → the model name its results record (``bm25``, ``run:FILE``, the full hub id of the
            default model's alias); None for a fusion or a rerank (its members' or first stage's own).
        identity: (config, the default config) → (its decisive settings, their defaults): with the depth, the
            self-hit policy and the reranker, what its configuration hash reads (`harness.reporting.variant`);
            None for a fusion (its identity is its members', `harness.pipeline.fuse`) or a rerank (its first
            stage's, and the reranker).
        device: ``none`` (nothing to run on: scoring, BM25; resolved to ``cpu``), ``cpu`` (CPUs only, one worker
            per one listed) or ``any`` (a model on torch's devices).
        cacheable: What it computes is kept in the cache (embeddings, sparse rows, rerank scores).
        ray: ``--engine ray`` fans its encoding out over a Ray cluster; otherwise it runs here.
        probed: ``--backend auto`` has a model with weights to probe (else the backend is moot: torch).
        vectors: It searches dense vectors: the index, the compression axes and the encoder's runtime apply.
        encodes: It turns texts into vectors or rows, so the encoder's settings apply to it.
        weights: Its model has weights found in a folder, the Hugging Face cache or on the hub (checked before
            anything runs; prompts from the model registry; refused when it is a cross-encoder).
        service: Its vectors come from an embedding service (``--endpoint``; no weights to fingerprint).
        composite: Made of other systems (a fusion's members, a rerank's first stage).
        retrieves: It searches the corpus (``retrieve``, ``pool --systems``); a run file is only read.
        check: config → None, refusing (`HarnessError`, one line) the settings this kind cannot honour, before anything
            loads (`harness.pipeline.checks`); None: nothing beyond the common checks.
        passages: It can score a document by its passages (``--passages``: `harness.retrieval.index.passages`), split by
            its model's own tokenizer.
        document_length: model folder → the tokens its model reads of a document (what a ``--passages`` window may
            not exceed), read without loading weights; None: `harness.retrieval.index.passages.model_max_length`.
    """

    name: str
    what: str
    recognise: Callable[[str], bool]
    model_name: Callable[[System], str] | None = None
    identity: Callable[[Any, Any], tuple[dict, dict]] | None = None
    device: str = "any"
    cacheable: bool = False
    ray: bool = False
    probed: bool = False
    vectors: bool = False
    encodes: bool = False
    weights: bool = False
    service: bool = False
    composite: bool = False
    retrieves: bool = True
    check: Callable[[Any], None] | None = None
    passages: bool = False
    document_length: Callable[[str], int | None] | None = None

    @property
    def needs_device(self) -> bool:
        """Whether it runs a model on torch's devices (``--device`` resolved against what torch sees)."""
        return self.device == "any"


RERANK = Kind(
    "rerank",
    "a reranked system",
    lambda text: bool(_top_level(text, ">>")),
    device="any",
    cacheable=True,
    composite=True,
)
FUSION = Kind("fusion", "a fusion", lambda text: _FUSION.match(text) is not None, device="none", composite=True)
CANDIDATES = Kind(  # the first stage of a rerank written ">> CROSS_ENCODER": the command's candidate set
    "candidates",
    "the candidate set (--candidates)",
    lambda text: False,  # never written alone: only as the empty first stage of a rerank
    model_name=lambda system: "candidates",
    identity=_no_settings,
    device="none",
    retrieves=False,
)
RUN = Kind(
    "run",
    "an external run",
    lambda text: text.startswith(RUN_PREFIX),
    model_name=lambda system: RUN_PREFIX + Path(system.model).name,
    identity=_no_settings,
    device="none",
    retrieves=False,
)
BM25 = Kind(
    "bm25",
    "BM25",
    lambda text: text.lower() == BM25_NAME,
    model_name=lambda system: BM25_NAME,
    identity=_bm25_settings,
    device="none",
)
HASH = Kind(
    "hash",
    "the hashing stand-in encoder",
    lambda text: text.startswith(HASH_PREFIX),
    model_name=_canonical,
    identity=_vector_settings,
    device="cpu",
    cacheable=True,
    ray=True,
    vectors=True,
    encodes=True,
)
ENDPOINT = Kind(
    "endpoint",
    "an embedding service",
    lambda text: text.startswith(ENDPOINT_PREFIX),
    model_name=_canonical,
    identity=_endpoint_settings,
    cacheable=True,
    ray=True,
    vectors=True,
    encodes=True,
    service=True,
)
SPARSE = Kind(
    "sparse",
    "a sparse encoder",
    _is_sparse_folder,
    model_name=_canonical,
    identity=_sparse_settings,
    cacheable=True,
    encodes=True,
    weights=True,
    passages=True,
)
MULTI_VECTOR = Kind(
    "multi-vector",
    "a multi-vector (late-interaction) model",
    lambda text: _late("is_multi_vector_model")(text),
    model_name=_canonical,
    identity=lambda config, default: _late("identity")(config, default),
    encodes=True,
    weights=True,
    check=lambda config: _late("refuse_settings")(config),
    passages=True,
    document_length=lambda folder: _late("document_length")(folder),
)
DENSE = Kind(
    "dense",
    "a dense model",
    lambda text: True,
    model_name=_canonical,
    identity=_vector_settings,
    cacheable=True,
    ray=True,
    probed=True,
    vectors=True,
    encodes=True,
    weights=True,
    passages=True,
)
KINDS = (RERANK, FUSION, RUN, BM25, HASH, ENDPOINT, SPARSE, MULTI_VECTOR, DENSE)  # the order they are recognised in
BY_NAME = {kind.name: kind for kind in KINDS}


@dataclass(frozen=True)
class System:
    """One system, parsed (`parse_system`).

    Attributes:
        spec: The system as written, without its label (stripped).
        kind: Its `Kind`.
        label: The label given with ``LABEL=SYSTEM``; None: derived from the system.
        model: A first stage's model as written (a model name or folder, ``bm25``, ``hash:N``, ``openai:MODEL``), or
            a run's file; empty for a fusion or a rerank.
        members: A fusion's systems, in order (what `fusion.weights` refer to).
        fusion: How a fusion fuses them.
        first: A rerank's first stage.
        reranker: A rerank's cross-encoder.
        rerank_depth: How many of the first stage's documents a rerank re-sorts (and keeps).
    """

    spec: str
    kind: Kind
    label: str | None = None
    model: str = ""
    members: tuple[System, ...] = ()
    fusion: FusionSpec | None = None
    first: System | None = None
    reranker: str = ""
    rerank_depth: int | None = None

    @property
    def stage(self) -> System:
        """The system whose first stage retrieves: a rerank's first stage, else the system itself."""
        return self.first if self.first is not None else self

    @property
    def model_name(self) -> str:
        """The model name a result of the system records (a rerank's: its first stage's).

        Raises:
            HarnessError: A fusion, whose result records ``fusion`` and its members' names.
        """
        stage = self.stage
        if stage.kind.model_name is None:
            raise HarnessError(f"system {self.spec!r}: {stage.kind.what} has no model of its own")
        return stage.kind.model_name(stage)

    def depth(self, top_k: int | None, k_values: tuple[int, ...] = ()) -> int:
        """Documents kept per query: a rerank's depth, a fusion's ``depth``, else `top_k`, else the larger of 100
        and the largest cutoff asked for."""
        if self.rerank_depth is not None:
            return self.rerank_depth
        if self.fusion is not None:
            return self.fusion.depth
        return top_k if top_k is not None else max(DEFAULT_DEPTH, max(k_values, default=0))


def parse_system(text: str) -> System:
    """The system `text` writes: ``LABEL=SYSTEM`` or ``SYSTEM`` (an ``=`` inside parentheses is a fusion setting).

    Raises:
        HarnessError: An empty label or system, more than one ``=`` outside parentheses, unbalanced parentheses, a
            label with an unbalanced bracket, a malformed rerank, or a fusion with an unknown method or setting,
            fewer than two systems, a nested fusion, or weights that do not fit.
    """
    label, spec = split_label(text)
    return replace(_unlabelled(spec), label=label)


def split_label(text: str) -> tuple[str | None, str]:
    """(the label, the system) of ``LABEL=SYSTEM``, (None, the system) of ``SYSTEM``; the system is not parsed.

    Raises:
        HarnessError: An empty label or system, more than one ``=`` outside parentheses, unbalanced parentheses, or
            a label with an unbalanced bracket.
    """
    _check_parentheses(text, "system")
    cuts = _top_level(text, "=")
    if not cuts:
        return None, text.strip()
    how = "write LABEL=SYSTEM, e.g. hybrid=rrf(bm25, e5)"
    if len(cuts) > 1:
        raise HarnessError(f"system {text!r}: more than one '=' outside parentheses; {how}")
    label, spec = text[: cuts[0]].strip(), text[cuts[0] + 1 :].strip()
    if not label or not spec:
        raise HarnessError(f"system {text!r}: no {'label before' if not label else 'system after'} the '='; {how}")
    try:
        return check_label(label), spec
    except HarnessError as exc:
        raise HarnessError(f"system {text!r}: {exc}") from None


def _check_parentheses(text: str, what: str) -> None:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            raise HarnessError(f"{what} {text!r}: a ')' closes nothing")
    if depth:
        raise HarnessError(f"{what} {text!r}: a '(' is never closed")


def _unlabelled(text: str) -> System:
    if not text:
        raise HarnessError("an empty system; name a model, bm25, a fusion or FIRST >> CROSS_ENCODER@DEPTH")
    kind = next(kind for kind in KINDS if kind.recognise(text))
    if kind is RERANK:
        return _rerank(text)
    if kind is FUSION:
        return _fusion(text)
    return System(text, kind, model=text[len(RUN_PREFIX) :] if kind is RUN else text)


def _rerank(text: str) -> System:
    arrows = _top_level(text, ">>")
    if len(arrows) > 1:
        raise HarnessError(f"system {text!r}: one reranker per system; {_RERANK_HOW}")
    first, second = text[: arrows[0]].strip(), text[arrows[0] + 2 :].strip()
    reranker, at, depth = second.rpartition("@")
    if not at:  # a rerank of the candidate set takes its depth from the set (`configure`)
        reranker, depth = second, str(RERANK_DEPTH) if first else ""
    if not reranker.strip() or (at and not (depth.isascii() and depth.isdigit())):
        raise HarnessError(f"system {text!r}: {_RERANK_HOW}")
    if not first:  # ">> CROSS_ENCODER": the candidate set is its first stage
        return System(text, RERANK, first=System("", CANDIDATES), reranker=reranker.strip(), rerank_depth=_depth(depth))
    stage = _unlabelled(first)
    if stage.kind.composite:
        raise HarnessError(
            f"system {text!r}: reranking {stage.kind.what} is not supported; rerank a first stage (bm25, a model), "
            "or each member inside the fusion, e.g. rrf(bm25 >> CROSS_ENCODER@100, e5)"
        )
    return System(text, RERANK, first=stage, reranker=reranker.strip(), rerank_depth=int(depth))


def _depth(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def _candidate_depth(system: System, base: Any) -> int:
    """A rerank's depth when the command gives a candidate set: the set's own (every rerank reranks all of it).

    Raises:
        HarnessError: A rerank of the candidate set without one, a rerank naming its own first stage beside one, or
            a depth other than the set's.
    """
    spec = getattr(base, "candidates", None)
    if system.first.kind is CANDIDATES and spec is None:
        raise HarnessError(
            f"system {system.spec!r}: a rerank without a first stage reranks the candidate set; give it with "
            "--candidates RUN_OR_SYSTEM --depth N, or write FIRST >> CROSS_ENCODER"
        )
    if system.first.kind is not CANDIDATES:
        raise HarnessError(
            f"system {system.spec!r}: --candidates gives every rerank its first stage; write '>> {system.reranker}'"
        )
    if system.rerank_depth is not None and system.rerank_depth != spec.depth:
        raise HarnessError(
            f"system {system.spec!r}: every rerank reranks the whole candidate set (--depth {spec.depth}); write "
            f"'>> {system.reranker}' or '>> {system.reranker}@{spec.depth}'"
        )
    return spec.depth


def _fusion(text: str) -> System:
    match = _FUSION.match(text)
    method = match["method"].lower()
    if method not in METHODS:
        raise HarnessError(
            f"system {text!r}: unknown fusion method {match['method']!r}; use one of {', '.join(METHODS)}"
        )
    members, settings = [], {}
    for item in split_systems(match["inner"]):
        key, equals, value = item.partition("=")
        if not equals or ">>" in key:
            if _is_number(item):
                raise HarnessError(
                    f"system {text!r}: {item!r} is not a system; separate weights with ':', e.g. "
                    "weights=0.3:0.7 (a ',' separates systems)"
                )
            members.append(item)
            continue
        if key.strip() not in _SETTINGS:
            raise HarnessError(f"system {text!r}: unknown fusion setting {key.strip()!r}; use {', '.join(_SETTINGS)}")
        settings[_SETTINGS[key.strip()]] = _setting(text, key.strip(), value.strip())
    nested = [member for member in members if _FUSION.match(member)]
    if nested:
        raise HarnessError(
            f"system {text!r}: a fusion of a fusion ({nested[0]!r}) is not supported; fuse the systems in one"
        )
    spec = FusionSpec(method=method, **settings)
    try:
        spec.check(len(members))
    except HarnessError as exc:
        raise HarnessError(f"system {text!r}: {exc}") from None
    return System(text, FUSION, members=tuple(_unlabelled(member) for member in members), fusion=spec)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _setting(text: str, key: str, value: str):
    try:
        if key == "weights":
            return parse_weights(value)
        return int(value) if key in ("k", "depth") else value
    except (ValueError, HarnessError):
        raise HarnessError(
            f"system {text!r}: {key}={value!r} is not a valid value (e.g. k=60, depth=1000, weights=0.3:0.7)"
        ) from None


def split_systems(value: str) -> list[str]:
    """Split a comma-separated list of systems, keeping the commas inside parentheses; duplicates go.

    Raises:
        HarnessError: Unbalanced parentheses.
    """
    _check_parentheses(value, "systems")
    cuts = [-1, *_top_level(value, ","), len(value)]
    items = (value[start + 1 : end].strip() for start, end in zip(cuts, cuts[1:]))
    return list(dict.fromkeys(item for item in items if item))


# --- systems and configs ----------------------------------------------------------------------------------------


def system_of(config: Any) -> System:
    """The system an `EvaluateConfig` runs: its run file (``run_path``), else its ``model`` parsed, reranked by its
    ``rerank`` when it has one (and the model names none).

    Raises:
        HarnessError: A model that `parse_system` refuses.
    """
    if config.run_path is not None:
        system = System(f"{RUN_PREFIX}{config.run_path}", RUN, model=str(config.run_path))
    else:
        system = parse_system(config.model)
    if config.rerank is None or system.kind is RERANK or system.kind is FUSION:
        return system
    rerank = config.rerank
    return System(
        f"{system.spec} >> {rerank.model}@{rerank.depth}",
        RERANK,
        system.label,
        first=replace(system, label=None),
        reranker=rerank.model,
        rerank_depth=rerank.depth,
    )


def configure(system: System, base: Any) -> Any:
    """`base` (an `EvaluateConfig`) set up to run `system`: its model or run file, and a rerank's reranker (its batch
    size and max length from ``base.rerank``).

    Raises:
        HarnessError: A fusion (its members are configured one by one), or a reranker given twice.
    """
    if system.kind is FUSION:
        raise HarnessError(f"system {system.spec!r}: a fusion runs its members one by one; configure each")
    if system.kind is RERANK:
        from harness.retrieval.rerank import RerankSpec

        template = base.rerank or RerankSpec(system.reranker)
        depth = system.rerank_depth
        if system.first.kind is CANDIDATES or getattr(base, "candidates", None) is not None:
            depth = _candidate_depth(system, base)
        config = configure(system.first, base)
        return replace(config, rerank=replace(template, model=system.reranker, depth=depth))
    if system.kind is CANDIDATES:  # the set's file once made (`harness.pipeline.candidates`), its source until then
        spec = base.candidates
        return replace(base, run_path=Path(spec.run_path or spec.source.removeprefix(RUN_PREFIX)))
    if system.kind is RUN:
        return replace(base, run_path=Path(system.model))
    return replace(base, model=system.model)


def settle(config: Any) -> Any:
    """`config` (an `EvaluateConfig`) with its model's text resolved, so that every command takes a system the same
    way: ``LABEL=`` becomes its ``name``, ``FIRST >> CROSS_ENCODER@DEPTH`` its ``rerank``, ``run:FILE`` its
    ``run_path``; a fusion stays as written (its members are configured one by one, `configure`).

    Raises:
        HarnessError: A model that `parse_system` refuses, a label beside another name, or a reranker given twice.
    """
    if config.run_path is not None:
        return config
    system = parse_system(config.model)
    if system.label is not None:
        if config.name is not None and config.name != system.label:
            raise HarnessError(
                f"system {config.model!r} is labelled {system.label!r} and named {config.name!r}; give one name"
            )
        config = replace(config, name=system.label)
    if system.kind is FUSION:
        return replace(config, model=system.spec)
    if system.kind is RERANK and config.rerank is not None:
        raise HarnessError(
            f"system {system.spec!r} names its reranker, and a reranker is given too ({config.rerank.model}); "
            "give it once"
        )
    return configure(system, config)
