"""The label a system is shown under, the same in every output (Markdown, LaTeX, CSV, JSON, HTML, plots,
`inspect`, `compare`).

A result stores its label in full (``--name`` or a bench ``LABEL=SPEC``, else the model and its variant
tokens, or for a fusion ``method(member, member; settings)``, `harness.retrieval.fusion.FusionSpec.label`).
`display_label` derives what is shown from the result itself: each model name the result is made of
(its model, a fusion's members) becomes its last path component, ``sentence-transformers/all-MiniLM-L6-v2``
→ ``all-MiniLM-L6-v2``, as a whole name and never by cutting the label at a ``/``, so a bracket stays
with its partner. `column_labels` makes the labels of one table unique; every output takes its labels
from it, so no output shortens or renames on its own.

Which rerankers of a table reranked the same candidates is said in its notes (`candidate_notes`): a rerank's result
records its candidate set (``config["candidates"]``: source, depth and sha256, `harness.pipeline.candidates`) or,
reranking its own first stage, none. The notes name each set by the first 8 hex digits of its sha256 with the
rerankers on it, per dataset; where one dataset's rerankers reranked different candidates a line says so, and where a
significance test pits two such rerankers against each other a line says that its † compares first stages as much
as rerankers (`tested_across_sets`). The table is not refused: those lines are the warning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from harness.errors import HarnessError
from harness.reporting.report import Result

_PAIRS = {")": "(", "]": "[", "}": "{"}
_SCHEME = re.compile(r"^[a-z][a-z0-9+-]*:(?!//)")  # run:..., openai:..., hash:... keep their prefix


def short_model(name: str) -> str:
    """A model name's last path component: ``org/model`` → ``model``, ``./models/m/`` → ``m``,
    ``run:out/x.trec`` → ``run:x.trec``; a name without ``/`` is unchanged."""
    prefix = _SCHEME.match(name)
    head, rest = (prefix.group(0), name[prefix.end() :]) if prefix else ("", name)
    parts = [part for part in re.split(r"[/\\]", rest) if part]
    return head + parts[-1] if len(parts) > 1 else name


# Where a label the harness makes has a space (a fusion's ``, `` and ``; ``, a rerank's `` >> ``), its TREC run tag has
# the ``_`` that `harness.io.trec.write_run` writes for it: a tag holds no whitespace.
_TAG_SPACES = re.compile(r"(?<=[,;])_|_(?=>>)|(?<=>>)_")


def tag_label(tag: str) -> str:
    """The label a TREC run tag was written from, for a run read back from its file: the spaces of the system syntax
    restored, ``rrf(bm25,_hash:64)`` → ``rrf(bm25, hash:64)``, ``bm25_>>_ce@10`` → ``bm25 >> ce@10``; any other
    ``_`` (``my_model``) stays, as the writer cannot tell it from a space."""
    return _TAG_SPACES.sub(" ", tag)


def check_label(label: str) -> str:
    """A label given by the user, stripped; refused when it cannot be shown as one readable name.

    Raises:
        HarnessError: An empty label, a line break, or an unbalanced bracket.
    """
    text = label.strip()
    if not text:
        raise HarnessError(f"label {label!r} is empty; give a name, e.g. hybrid")
    if "\n" in text or "\r" in text:
        raise HarnessError(f"label {label!r} holds a line break; give a one-line label")
    stack: list[str] = []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in _PAIRS and (not stack or stack.pop() != _PAIRS[char]):
            raise HarnessError(f"label {label!r}: a {char!r} closes nothing; balance its brackets")
    if stack:
        raise HarnessError(f"label {label!r}: a {stack[-1]!r} is never closed; balance its brackets")
    return text


def _model_names(result: Result) -> list[str]:
    """The model names a result is made of: its model and, for a fusion, each member's model (recorded
    since labels were derived here; for older fusions, the first word of each member's label)."""
    names = [result.model]
    for member in result.config.get("inputs") or ():
        if isinstance(member, dict):
            names += [str(member["model"])] if member.get("model") else []
            names += str(member.get("label") or "").split(" ")[:1]
    return [name for name in names if name]


def display_label(result: Result) -> str:
    """The label shown for `result`: its stored label with each of its model names shortened
    (`short_model`) where the name stands whole (not inside a longer name)."""
    label = result.label or result.model
    for name in sorted(set(_model_names(result)), key=len, reverse=True):
        short = short_model(name)
        if short != name:
            label = re.sub(rf"(?<![\w./\\:-]){re.escape(name)}(?![\w./\\-])", lambda _: short, label)
    return label


def column_labels(results: Sequence[Result], notes: list[str]) -> tuple[list[Result], dict[int, str]]:
    """One result per (dataset, split, stored label), and each one's column label (by ``id``).

    Results of one configuration found twice (copied folders) keep the newest. Labels are
    `display_label`s, except where two different stored labels would show the same (``a/m`` and
    ``b/m``): those keep their stored labels. Results of different configurations sharing one label
    get their configuration hash appended, and a note names them and the fix.
    """
    groups: dict[tuple[str, str, str], list[Result]] = {}
    for result in results:
        groups.setdefault((result.dataset, result.split, result.label or result.model), []).append(result)
    chosen: dict[tuple[str, str, str], list[Result]] = {}
    for (dataset, split, label), group in groups.items():
        by_hash: dict[str, Result] = {}
        for result in sorted(group, key=lambda r: r.created or ""):
            by_hash[result.config_hash or result.where] = result
        if len(by_hash) < len(group):
            notes.append(
                f"{dataset} × {label}: {len(group)} results of {len(by_hash)} configuration(s); the newest of "
                f"each is shown ({', '.join(r.where for r in by_hash.values())})"
            )
        chosen[(dataset, split, label)] = list(by_hash.values())
    kept = [result for members in chosen.values() for result in members]
    shown = _unique_display(kept)
    labels: dict[int, str] = {}
    for (dataset, _, label), members in chosen.items():
        for result in members:
            key = result.config_hash or result.where
            labels[id(result)] = shown[id(result)] if len(members) == 1 else f"{shown[id(result)]} #{key[:8]}"
        if len(members) > 1:
            notes.append(_collision_note(dataset, label, members, labels))
    return kept, labels


def _unique_display(results: Iterable[Result]) -> dict[int, str]:
    """`display_label` of each result, or its stored label where two stored labels share a display label."""
    results = list(results)
    stored: dict[str, set[str]] = {}
    for result in results:
        stored.setdefault(display_label(result), set()).add(result.label or result.model)
    return {id(r): display_label(r) if len(stored[display_label(r)]) == 1 else r.label or r.model for r in results}


def _collision_note(dataset: str, label: str, members: list[Result], labels: dict[int, str]) -> str:
    """One line: which results share `label`, how they are shown, and how to give each its own label."""
    shown = ", ".join(f"{r.where} as {labels[id(r)]!r}" for r in members)
    return (
        f"{dataset}: {len(members)} different systems are labelled {label!r} ({shown}); give each its own label "
        f'(bench --systems "a=SYSTEM, b=SYSTEM", or evaluate/fuse --name)'
    )


# --- candidate sets: which rerankers reranked the same candidates

OWN = "own"  # the key of a rerank of its own first stage (no candidate set)


def candidate_key(result: Result) -> str | None:
    """The candidate set a reranked result reranked: the first 8 hex digits of its sha256, `OWN` for a rerank of its
    own first stage, None for a result that reranked nothing."""
    if not result.config.get("rerank"):
        return None
    candidates = result.config.get("candidates") or {}
    return str(candidates.get("sha256", ""))[:8] or OWN


def candidate_keys(results: Iterable[Result], labels: Mapping[int, str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(dataset, column label) → (its candidate key, how the set was made) for each reranked result."""
    keys = {}
    for result in results:
        key = candidate_key(result)
        if key is None:
            continue
        candidates = result.config.get("candidates") or {}
        made = (
            f"top {candidates.get('depth')} of {candidates.get('source')}"
            if key != OWN
            else f"its own first stage, {result.model}"
        )
        keys[(result.dataset, labels[id(result)])] = (key, made)
    return keys


def candidate_notes(keys: Mapping[tuple[str, str], tuple[str, str]]) -> list[str]:
    """A note per candidate set naming its rerankers, and one per dataset whose rerankers reranked different
    candidates."""
    by_dataset: dict[str, dict[str, list[str]]] = {}
    made: dict[tuple[str, str], str] = {}
    for (dataset, label), (key, how) in keys.items():
        by_dataset.setdefault(dataset, {}).setdefault(key, []).append(label)
        made[(dataset, key)] = how
    notes = []
    for dataset, sets in by_dataset.items():
        for key, labels in sets.items():
            if key != OWN:
                notes.append(
                    f"{dataset}: candidate set {key} ({made[(dataset, key)]}) reranked by {', '.join(sorted(labels))}"
                )
        if len(sets) > 1 or (OWN in sets and len(sets[OWN]) > 1):
            what = "; ".join(
                f"{', '.join(sorted(labels))} on {key if key != OWN else 'their own first stages'}"
                for key, labels in sets.items()
            )
            notes.append(
                f"{dataset}: these rerankers did not rerank the same candidates ({what}): their difference is their "
                "first stages' as much as their rerankers'; compare rerankers on one --candidates set"
            )
    return notes


def tested_across_sets(keys: Mapping[tuple[str, str], tuple[str, str]], base: str, models: Iterable[str]) -> str | None:
    """A note when a significance test against `base` pits it against a reranker of other candidates, else None."""
    crossed = sorted(
        {
            f"{model} ({dataset})"
            for (dataset, model), (key, _) in keys.items()
            if model != base and (dataset, base) in keys and keys[(dataset, base)][0] != key and model in set(models)
        }
    )
    if not crossed:
        return None
    return (
        f"† against {base} compares rerankers of other candidate sets for {', '.join(crossed)}: a difference there "
        "is their first stages' as much as their rerankers'"
    )
