"""Systems as a grid names them: a model, ``FIRST >> CROSS_ENCODER@DEPTH``, or a fusion of systems,
each optionally labelled ``LABEL=SYSTEM``.

A fusion is written ``METHOD(SYSTEM, SYSTEM[, ...][, SETTING=VALUE ...])`` with METHOD one of
`harness.retrieval.fusion.METHODS` and the settings ``norm=minmax|zscore|none``, ``k=60`` (RRF's k),
``weights=0.3:0.7`` (wsum, one per system, colon-separated, as ``fuse --weights``) and ``depth=1000``;
e.g. ``rrf(bm25, all-MiniLM-L6-v2)`` or ``wsum(bm25, e5, weights=0.3:0.7, norm=zscore)``. A list of
systems is comma-separated; commas inside a fusion's parentheses belong to the fusion.

A label goes before the system, up to the one ``=`` outside parentheses: ``hybrid=rrf(bm25, e5)``; it
is the system's name in every table, page and plot (else the model and its settings, or for a fusion
`harness.retrieval.fusion.FusionSpec.label`). Two systems of one grid never share a label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.reporting.labels import check_label
from harness.retrieval.fusion import METHODS, FusionSpec, parse_weights

_FUSION = re.compile(r"^\s*(?P<method>[A-Za-z]+)\s*\((?P<inner>.*)\)\s*$", re.S)
_SETTINGS = {"norm": "norm", "k": "rrf_k", "weights": "weights", "depth": "depth"}


@dataclass(frozen=True)
class FusedSystem:
    """A fusion of other systems of the grid.

    Attributes:
        text: The system as written.
        members: The fused systems, in order (what `weights` refer to).
        spec: How they are fused.
    """

    text: str
    members: tuple[str, ...]
    spec: FusionSpec


@dataclass(frozen=True)
class System:
    """One system of a grid as written.

    Attributes:
        spec: The system (a model, ``FIRST >> CROSS_ENCODER@DEPTH`` or a fusion), without its label.
        label: The label given with ``LABEL=SYSTEM``; None: derived from the system.
    """

    spec: str
    label: str | None = None


def parse_system(text: str) -> System:
    """``LABEL=SYSTEM`` or ``SYSTEM`` (an ``=`` inside parentheses is a fusion setting, not a label).

    Raises:
        HarnessError: An empty label or system, more than one ``=`` outside parentheses, unbalanced
            parentheses, or a label with an unbalanced bracket.
    """
    depth, cuts = 0, []
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            raise HarnessError(f"system {text!r}: a ')' closes nothing")
        if char == "=" and depth == 0:
            cuts.append(i)
    if depth:
        raise HarnessError(f"system {text!r}: a '(' is never closed")
    if not cuts:
        return System(text.strip())
    how = "write LABEL=SYSTEM, e.g. hybrid=rrf(bm25, e5)"
    if len(cuts) > 1:
        raise HarnessError(f"system {text!r}: more than one '=' outside parentheses; {how}")
    label, spec = text[: cuts[0]].strip(), text[cuts[0] + 1 :].strip()
    if not label or not spec:
        raise HarnessError(f"system {text!r}: no {'label before' if not label else 'system after'} the '='; {how}")
    try:
        label = check_label(label)
    except HarnessError as exc:
        raise HarnessError(f"system {text!r}: {exc}") from None
    return System(spec, label)


def parse_systems(value: str | list[str]) -> list[System]:
    """The systems of a comma-separated list (or of a list of items), each once, labels unique.

    Raises:
        HarnessError: A malformed item (`parse_system`), one system listed under two labels, or two
            systems sharing one label (naming both, and how to label them apart).
    """
    items = split_systems(value) if isinstance(value, str) else [item for item in value if item.strip()]
    systems = list(dict.fromkeys(map(parse_system, items)))
    by_spec: dict[str, System] = {}
    for system in systems:
        other = by_spec.setdefault(system.spec, system)
        if other is not system:
            raise HarnessError(
                f"system {system.spec!r} is listed twice, as {other.label or system.spec!r} and "
                f"{system.label or system.spec!r}; list it once"
            )
    shown: dict[str, System] = {}
    for system in systems:
        name = system.label or system.spec
        other = shown.setdefault(name, system)
        if other is not system:
            raise HarnessError(
                f"systems {other.spec!r} and {system.spec!r} are both labelled {name!r} in one table; "
                f'give each its own label, e.g. --systems "a={other.spec}, b={system.spec}"'
            )
    return systems


def split_systems(value: str) -> list[str]:
    """Split a comma-separated list of systems, keeping the commas inside parentheses; duplicates go.

    Raises:
        HarnessError: Unbalanced parentheses.
    """
    items, depth, current = [], 0, []
    for char in value:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            raise HarnessError(f"systems {value!r}: a ')' closes nothing")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise HarnessError(f"systems {value!r}: a '(' is never closed")
    items.append("".join(current))
    return list(dict.fromkeys(item.strip() for item in items if item.strip()))


def parse_fusion(text: str) -> FusedSystem | None:
    """The fusion `text` writes, or None when it is not a fusion (a model or a reranked system).

    Raises:
        HarnessError: A fusion with an unknown method or setting, fewer than two systems, a nested
            fusion, or weights that do not fit.
    """
    match = _FUSION.match(text)
    if match is None or ">>" in text.split("(")[0]:
        return None
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
    spec.check(len(members))
    return FusedSystem(text.strip(), tuple(members), spec)


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
