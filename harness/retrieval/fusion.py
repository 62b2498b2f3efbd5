"""Fusion: several runs of one query set become one run.

Definitions (as ranx and pyserini use them), per query, with s_r(d) the score of document d in run r
and a document missing from a run contributing nothing:

* ``rrf`` — reciprocal rank fusion: ``Σ_r 1 / (k + rank_r(d))``, ranks from 1 in the trec_eval order
  (score descending, ties by doc_id descending), k = 60 by default; scores are not normalized.
* ``combsum`` — ``Σ_r n_r(d)``; ``combmnz`` — CombSUM × the number of runs that hold d;
  ``wsum`` — ``Σ_r w_r · n_r(d)`` with the given weights (missing scores count 0).
* ``dbsf`` — distribution-based score fusion: each run's scores are clipped to
  ``[μ − 3σ, μ + 3σ]`` of that query's scores and mapped linearly onto [0, 1] over that interval
  (σ = 0: every score 0.5), then summed; it ignores `norm`.

Normalizations n_r for combsum, combmnz and wsum, per query and run: ``minmax`` —
``(s − min) / (max − min)`` (all scores equal: 0); ``zscore`` — ``(s − mean) / std`` with the
population standard deviation (std = 0: 0); ``none``.

The fused run keeps the top `depth` documents of each query, cut by the ranking rule (`harness.records.top_scores`:
float32 scores, then doc_id, descending), so a fusion at depth K is the first K of the same fusion at a greater depth.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.records import Run

METHODS = ("rrf", "combsum", "combmnz", "wsum", "dbsf")
NORMS = ("minmax", "zscore", "none")
NORMALIZED = ("combsum", "combmnz", "wsum")  # the methods that use `norm`
WEIGHTS_SEPARATOR = ":"  # weights=0.3:0.7 in a system, --weights 0.3:0.7 in `fuse`: one syntax for both


def parse_weights(text: str) -> tuple[float, ...]:
    """Weights written ``0.3:0.7`` (one per run, in order); ``0.3,0.7`` is read too where a comma cannot
    mean anything else (`fuse --weights`).

    Raises:
        HarnessError: A part that is not a number, an empty part, or both separators.
    """
    separator = WEIGHTS_SEPARATOR if WEIGHTS_SEPARATOR in text or "," not in text else ","
    parts = text.split(separator)
    try:
        if "," in text and separator != ",":
            raise ValueError
        return tuple(float(part) for part in parts)
    except ValueError:
        also = " (or comma-separated numbers: 0.3,0.7)" if "," in text else ""
        raise HarnessError(
            f"weights {text!r}: write one number per run separated by '{WEIGHTS_SEPARATOR}', e.g. 0.3:0.7{also}"
        ) from None


def _number(value: float) -> str:
    """A weight as short as it reads back exactly (0.3, not 0.30000000000000004 nor 0.300000)."""
    short = format(value, "g")
    return short if float(short) == value else repr(value)


@dataclass(frozen=True)
class FusionSpec:
    """How runs are fused (recorded in the fused result's config).

    Attributes:
        method: One of `METHODS`.
        norm: One of `NORMS` (ignored by rrf and dbsf).
        weights: One weight per run, for wsum (default: equal weights).
        rrf_k: The k of RRF.
        depth: Documents kept per query in the fused run.
    """

    method: str = "rrf"
    norm: str = "minmax"
    weights: tuple[float, ...] | None = None
    rrf_k: int = 60
    depth: int = 1000

    def check(self, n_runs: int) -> None:
        """Raise HarnessError for an unknown method or norm, or weights that do not fit."""
        if self.method not in METHODS:
            raise HarnessError(f"unknown fusion method {self.method!r}; use one of {', '.join(METHODS)}")
        if self.norm not in NORMS:
            raise HarnessError(f"unknown normalization {self.norm!r}; use one of {', '.join(NORMS)}")
        if n_runs < 2:
            raise HarnessError(f"fusion needs at least two runs, got {n_runs}")
        if self.weights is not None:
            if self.method != "wsum":
                raise HarnessError(f"weights apply to wsum only, not {self.method}")
            if len(self.weights) != n_runs:
                raise HarnessError(f"{len(self.weights)} weights for {n_runs} runs; give one weight per run")
        if self.rrf_k < 0 or self.depth < 1:
            raise HarnessError(f"rrf_k must be ≥ 0 and depth ≥ 1, got {self.rrf_k} and {self.depth}")

    def label(self, members: Sequence[str]) -> str:
        """The readable name of this fusion of `members` (their labels): the method, the members, then the
        settings that differ from the defaults, e.g. ``rrf(bm25, e5)``, ``wsum(bm25, e5; 0.3:0.7, zscore)``,
        ``rrf(bm25, e5; k=20, depth=100)``. Two fusions that can give different numbers never share one."""
        default = FusionSpec(method=self.method)
        settings = [":".join(map(_number, self.weights))] if self.weights else []
        if self.method in NORMALIZED and self.norm != default.norm:
            settings.append(self.norm if self.norm != "none" else "norm=none")
        if self.method == "rrf" and self.rrf_k != default.rrf_k:
            settings.append(f"k={self.rrf_k}")
        if self.depth != default.depth:
            settings.append(f"depth={self.depth}")
        return f"{self.method}({', '.join(members)}{'; ' + ', '.join(settings) if settings else ''})"

    def to_config(self) -> dict[str, object]:
        uses_norm = self.method in NORMALIZED
        return {
            "method": self.method,
            **({"norm": self.norm} if uses_norm else {}),
            **({"weights": list(self.weights)} if self.weights else {}),
            **({"rrf_k": self.rrf_k} if self.method == "rrf" else {}),
            "depth": self.depth,
        }


def _minmax(scores: Mapping[str, float]) -> dict[str, float]:
    low, high = min(scores.values()), max(scores.values())
    return {d: (s - low) / (high - low) if high > low else 0.0 for d, s in scores.items()}


def _zscore(scores: Mapping[str, float]) -> dict[str, float]:
    mean = math.fsum(scores.values()) / len(scores)
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in scores.values()) / len(scores))
    return {d: (s - mean) / std if std > 0 else 0.0 for d, s in scores.items()}


def _dbsf(scores: Mapping[str, float]) -> dict[str, float]:
    mean = math.fsum(scores.values()) / len(scores)
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in scores.values()) / len(scores))
    if std == 0:
        return dict.fromkeys(scores, 0.5)
    low, high = mean - 3 * std, mean + 3 * std
    return {d: (min(max(s, low), high) - low) / (high - low) for d, s in scores.items()}


_NORMALIZE = {"minmax": _minmax, "zscore": _zscore, "none": dict}


def fuse(runs: Sequence[Run], spec: FusionSpec, name: str = "fusion") -> Run:
    """Fuse `runs` with `spec` (see the module docstring for the formulas).

    Raises:
        HarnessError: Bad settings (`FusionSpec.check`).
    """
    spec.check(len(runs))
    weights = spec.weights or (1.0,) * len(runs)
    fused: dict[str, dict[str, float]] = {}
    for query_id in dict.fromkeys(q for run in runs for q in run):
        totals: dict[str, float] = {}
        counts: dict[str, int] = {}
        for run, weight in zip(runs, weights):
            if not run.depth(query_id):
                continue
            if spec.method == "rrf":
                # the ranks every metric reads: the ranking rule's order (float32 scores, then doc_id, descending)
                contributions = {hit.doc_id: 1.0 / (spec.rrf_k + rank) for rank, hit in enumerate(run[query_id], 1)}
            elif spec.method == "dbsf":
                contributions = _dbsf(run.scores_of(query_id))
            else:
                contributions = _NORMALIZE[spec.norm](run.scores_of(query_id))
                if spec.method == "wsum":
                    contributions = {d: weight * s for d, s in contributions.items()}
            for doc_id, value in contributions.items():
                totals[doc_id] = totals.get(doc_id, 0.0) + value
                counts[doc_id] = counts.get(doc_id, 0) + 1
        if spec.method == "combmnz":
            totals = {d: s * counts[d] for d, s in totals.items()}
        fused[query_id] = totals
    return Run.adopt(fused, name=name).truncated(spec.depth)
