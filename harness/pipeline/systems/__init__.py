"""Systems: the kinds of system and the one parser of a system's text (`registry`), and systems as a grid lists
them (`grid`)."""

from harness.pipeline.systems.grid import check_labels, parse_systems
from harness.pipeline.systems.registry import (
    BY_NAME,
    KINDS,
    Kind,
    System,
    configure,
    parse_system,
    settle,
    split_label,
    split_systems,
    system_of,
)

__all__ = [
    "BY_NAME",
    "KINDS",
    "Kind",
    "System",
    "check_labels",
    "configure",
    "parse_system",
    "parse_systems",
    "settle",
    "split_label",
    "split_systems",
    "system_of",
]
