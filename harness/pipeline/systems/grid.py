"""Systems as a grid lists them (``bench --systems``, ``pool --systems``): comma-separated, each optionally
``LABEL=SYSTEM``, each parsed by `harness.pipeline.systems.registry.parse_system`. A label is the system's name in
every table, page and plot (else the model and its settings, or for a fusion
`harness.retrieval.fusion.FusionSpec.label`). Two systems of one grid never share a label.
"""

from __future__ import annotations

from dataclasses import replace

from harness.errors import HarnessError
from harness.pipeline.systems.registry import System, parse_system, split_label, split_systems


def parse_systems(value: str | list[str]) -> list[System]:
    """The systems of a comma-separated list (or of a list of items), each once, labels unique.

    Raises:
        HarnessError: A malformed item (`parse_system`), one system listed under two labels, or two
            systems sharing one label (naming both, and how to label them apart).
    """
    return [replace(parse_system(spec), label=label) for label, spec in check_labels(value)]


def check_labels(value: str | list[str]) -> list[tuple[str | None, str]]:
    """(label, system) of each item of a comma-separated list (or of a list of items), each once, labels unique;
    the systems themselves are not parsed.

    Raises:
        HarnessError: A malformed label (`split_label`), one system listed under two labels, or two systems sharing
            one label (naming both, and how to label them apart).
    """
    items = split_systems(value) if isinstance(value, str) else [item for item in value if item.strip()]
    systems = list(dict.fromkeys(map(split_label, items)))
    by_spec: dict[str, str | None] = {}
    for label, spec in systems:
        if spec in by_spec and by_spec[spec] != label:
            raise HarnessError(
                f"system {spec!r} is listed twice, as {by_spec[spec] or spec!r} and {label or spec!r}; list it once"
            )
        by_spec[spec] = label
    shown: dict[str, str] = {}
    for label, spec in systems:
        name = label or spec
        other = shown.setdefault(name, spec)
        if other != spec:
            raise HarnessError(
                f"systems {other!r} and {spec!r} are both labelled {name!r} in one table; "
                f'give each its own label, e.g. --systems "a={other}, b={spec}"'
            )
    return systems
