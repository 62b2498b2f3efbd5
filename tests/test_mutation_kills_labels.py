"""A fused label names every setting that can change the fused run (mutation testing: docs/mutation-report.md).

The reference is a brute-force loop over the settings written here, not the label code: two fusions whose
effective settings differ must get different labels, and the defaults must add nothing.
"""

from __future__ import annotations

import itertools

import pytest

from harness.retrieval.fusion import FusionSpec

METHODS = ("rrf", "combsum", "combmnz", "wsum", "dbsf")
USES_NORM = {"combsum", "combmnz", "wsum"}


def effective(method, norm, weights, rrf_k, depth):
    """What the fused run depends on (the module docstring's definitions): norm for the normalizing
    methods, weights for wsum, k for rrf, depth for all."""
    return (
        method,
        norm if method in USES_NORM else None,
        weights if method == "wsum" else None,
        rrf_k if method == "rrf" else None,
        depth,
    )


def specs():
    for method, norm, rrf_k, depth in itertools.product(
        METHODS, ("minmax", "zscore", "none"), (60, 20, 0), (1000, 100, 1)
    ):
        for weights in (None, (0.3, 0.7), (0.7, 0.3), (1.0, 1.0)) if method == "wsum" else (None,):
            yield (
                FusionSpec(method=method, norm=norm, weights=weights, rrf_k=rrf_k, depth=depth),
                effective(method, norm, weights, rrf_k, depth),
            )


def test_fusions_that_can_differ_never_share_a_label():
    by_label = {}
    for spec, settings in specs():
        label = spec.label(["bm25", "e5"])
        by_label.setdefault(label, set()).add(settings)
    shared = {label: s for label, s in by_label.items() if len(s) > 1}
    assert not shared


@pytest.mark.parametrize("method", METHODS)
def test_the_default_settings_add_nothing_to_the_label(method):
    assert FusionSpec(method=method).label(["bm25", "e5"]) == f"{method}(bm25, e5)"


@pytest.mark.parametrize(
    "spec, expected",
    [
        (FusionSpec(method="rrf", rrf_k=20), "rrf(bm25, e5; k=20)"),
        (FusionSpec(method="rrf", depth=100), "rrf(bm25, e5; depth=100)"),
        (FusionSpec(method="rrf", rrf_k=0, depth=1), "rrf(bm25, e5; k=0, depth=1)"),
        (FusionSpec(method="combsum", norm="zscore"), "combsum(bm25, e5; zscore)"),
        (FusionSpec(method="combmnz", norm="none"), "combmnz(bm25, e5; norm=none)"),
        (
            FusionSpec(method="wsum", weights=(0.3, 0.7), norm="zscore", depth=10),
            "wsum(bm25, e5; 0.3:0.7, zscore, depth=10)",
        ),
        (FusionSpec(method="wsum", weights=(0.1 + 0.2, 1.0)), "wsum(bm25, e5; 0.30000000000000004:1)"),
        (FusionSpec(method="dbsf", norm="zscore"), "dbsf(bm25, e5)"),
        (FusionSpec(method="dbsf", rrf_k=5), "dbsf(bm25, e5)"),
    ],
)
def test_each_non_default_setting_is_written_once(spec, expected):
    assert spec.label(["bm25", "e5"]) == expected


def test_a_weight_reads_back_exactly_from_its_label():
    for weight in (0.3, 0.1 + 0.2, 1 / 3, 2.0, 1e-7, 123456789.0):
        label = FusionSpec(method="wsum", weights=(weight, 1.0)).label(["a", "b"])
        written = label.split("; ", 1)[1].split(":", 1)[0]
        assert float(written) == weight


@pytest.mark.parametrize(
    "spec, config",
    [
        (FusionSpec(), {"method": "rrf", "rrf_k": 60, "depth": 1000}),
        (FusionSpec(method="rrf", norm="zscore", rrf_k=5, depth=7), {"method": "rrf", "rrf_k": 5, "depth": 7}),
        (FusionSpec(method="combsum", norm="zscore"), {"method": "combsum", "norm": "zscore", "depth": 1000}),
        (FusionSpec(method="combmnz", rrf_k=5), {"method": "combmnz", "norm": "minmax", "depth": 1000}),
        (
            FusionSpec(method="wsum", weights=(0.3, 0.7), norm="none", depth=10),
            {"method": "wsum", "norm": "none", "weights": [0.3, 0.7], "depth": 10},
        ),
        (FusionSpec(method="wsum"), {"method": "wsum", "norm": "minmax", "depth": 1000}),
        (FusionSpec(method="dbsf", norm="zscore"), {"method": "dbsf", "depth": 1000}),
    ],
)
def test_the_recorded_settings_are_those_the_method_uses(spec, config):
    assert spec.to_config() == config


def test_fusions_that_can_differ_never_share_a_recorded_configuration():
    by_config = {}
    for spec, settings in specs():
        by_config.setdefault(repr(sorted(spec.to_config().items())), set()).add(settings)
    assert all(len(s) == 1 for s in by_config.values())
