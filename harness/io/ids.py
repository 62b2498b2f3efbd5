"""Ids that are the same text in another Unicode normalisation: ``'café'`` typed as one code point (NFC, as most
editors and spreadsheets save it) or as ``e`` plus a combining accent (NFD, as macOS file names and some exports
hold it) look identical and compare unequal. Where an id is not found, `normalisation_hint` says so when that is
the reason; nothing is normalised silently (two ids may differ only so, on purpose)."""

from __future__ import annotations

import unicodedata
from collections.abc import Container, Iterable
from pathlib import Path

FORMS = ("NFC", "NFD")


def _form(text: str) -> str:
    return next((form for form in FORMS if unicodedata.is_normalized(form, text)), "mixed")


def normalisation_hint(identifier: str, known: Container[str], where: str) -> str:
    """Why `identifier` is not among `known` when its NFC or NFD form is, else ``""``: ``'café' (NFD) differs
    from 'café' (NFC) in corpus.jsonl only by Unicode normalisation: normalise the ids (e.g.
    unicodedata.normalize('NFC', id))``.

    Args:
        identifier: The id not found.
        known: The ids it was looked up in.
        where: How the message names them (a file name, ``the corpus``).
    """
    for form in FORMS:
        other = unicodedata.normalize(form, identifier)
        if other != identifier and other in known:
            return (
                f"{identifier!r} ({_form(identifier)}) differs from {other!r} ({_form(other)}) in {where} only by "
                "Unicode normalisation: normalise the ids (e.g. unicodedata.normalize('NFC', id))"
            )
    return ""


def first_normalisation_hint(identifiers, known: Container[str], where: str) -> str:
    """`normalisation_hint` for the first of `identifiers` that has one, else ``""``."""
    return next((hint for hint in (normalisation_hint(i, known, where) for i in identifiers) if hint), "")


def has_variants(identifier: str) -> bool:
    """Whether `identifier` has another NFC or NFD form (it holds characters that normalisation changes)."""
    return any(unicodedata.normalize(form, identifier) != identifier for form in FORMS)


def unknown_id_hint(identifier: str, ids: Iterable[str], where: str | Path) -> str:
    """`normalisation_hint` for an id not found among `ids` (streamed: read only when `identifier` has another
    form, so an ASCII id costs nothing), naming `where` by its file name."""
    if not has_variants(identifier):
        return ""
    forms = {unicodedata.normalize(form, identifier) for form in FORMS} - {identifier}
    return normalisation_hint(identifier, {i for i in ids if i in forms}, Path(where).name)
