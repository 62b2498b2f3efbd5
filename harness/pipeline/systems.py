"""Systems as a grid names them: a model, ``FIRST >> CROSS_ENCODER@DEPTH``, or a fusion of systems.

A fusion is written ``METHOD(SYSTEM, SYSTEM[, ...][, SETTING=VALUE ...])`` with METHOD one of
`harness.retrieval.fusion.METHODS` and the settings ``norm=minmax|zscore|none``, ``k=60`` (RRF's k),
``weights=0.3:0.7`` (wsum, one per system, colon-separated) and ``depth=1000``; e.g.
``rrf(bm25, all-MiniLM-L6-v2)`` or ``wsum(bm25, e5, weights=0.3:0.7, norm=zscore)``. A list of systems
is comma-separated; commas inside a fusion's parentheses belong to the fusion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.retrieval.fusion import METHODS, FusionSpec

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
        raise HarnessError(f"system {text!r}: unknown fusion method {match['method']!r}; use one of "
                           f"{', '.join(METHODS)}")
    members, settings = [], {}
    for item in split_systems(match["inner"]):
        key, equals, value = item.partition("=")
        if not equals or ">>" in key:
            members.append(item)
            continue
        if key.strip() not in _SETTINGS:
            raise HarnessError(f"system {text!r}: unknown fusion setting {key.strip()!r}; use "
                               f"{', '.join(_SETTINGS)}")
        settings[_SETTINGS[key.strip()]] = _setting(text, key.strip(), value.strip())
    nested = [member for member in members if _FUSION.match(member)]
    if nested:
        raise HarnessError(f"system {text!r}: a fusion of a fusion ({nested[0]!r}) is not supported; fuse the "
                           "systems in one")
    spec = FusionSpec(method=method, **settings)
    spec.check(len(members))
    return FusedSystem(text.strip(), tuple(members), spec)


def _setting(text: str, key: str, value: str):
    try:
        if key == "weights":
            return tuple(float(weight) for weight in value.split(":"))
        return int(value) if key in ("k", "depth") else value
    except ValueError:
        raise HarnessError(f"system {text!r}: {key}={value!r} is not a valid value (e.g. k=60, depth=1000, "
                           "weights=0.3:0.7)") from None
