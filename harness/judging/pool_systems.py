"""The systems a pool is made from, written as ``bench --systems`` writes them and parsed by the same parser
(`harness.pipeline.systems`): models (``bm25``, a sentence-transformers name or folder), ``FIRST >>
CROSS_ENCODER@DEPTH``, fusions ``METHOD(SYSTEM, SYSTEM[, SETTING=VALUE ...])``, each optionally
``LABEL=SYSTEM``.

Every system is checked before anything is retrieved: the spelling of each fusion (method, settings,
weights), and each system to retrieve with as `evaluate` checks it (settings, the model on this machine,
the reranker), so a typo costs nothing; a fault is one line naming the system, a usage error (exit 2). A
fusion's members are retrieved (or, with run files, taken from them) and fused with
`harness.retrieval.fusion.fuse`, the fusion `fuse` does; only the systems listed are pooled (a member not
listed is retrieved for its fusion only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from harness.errors import HarnessError
from harness.records import Run
from harness.retrieval.fusion import fuse


@dataclass(frozen=True)
class PoolSystems:
    """What a pool's `--systems` ask for.

    Attributes:
        listed: (name, spec) of each system pooled, in order; the name is the label, else the spec as written.
        retrieve: The specs of the non-fused systems needed (listed ones and fusion members), each once.
        fusions: Name → (member specs, `harness.retrieval.fusion.FusionSpec`) of each fused system listed.
    """

    listed: tuple[tuple[str, str], ...]
    retrieve: tuple[str, ...]
    fusions: Mapping[str, tuple[tuple[str, ...], object]] = field(default_factory=dict)


def _usage(message: str) -> HarnessError:
    error = HarnessError(message)
    error.usage = True  # the command line's mistake: exit 2
    return error


def parse_pool_systems(systems: Sequence[str]) -> PoolSystems:
    """The systems of `systems` (items of ``--systems``, each possibly labelled or a fusion).

    Raises:
        HarnessError (usage): A malformed system, label or fusion (unknown method, setting or weights).
    """
    from harness.pipeline.systems import parse_systems, split_systems

    try:
        parsed = parse_systems([item for text in systems for item in split_systems(text)])
        listed, fusions, retrieve = [], {}, []
        labelled = {s.label: s for s in parsed if s.label}
        for system in parsed:
            name = system.label or system.spec
            listed.append((name, system.spec))
            if system.fusion is None:
                retrieve.append(system.spec)
                continue
            members = tuple(labelled.get(member.spec, member) for member in system.members)  # a member may be a label
            for member in members:
                if member.fusion is not None:
                    raise HarnessError(
                        f"system {system.spec!r}: a fusion of a fusion ({member.spec!r}) is not "
                        "supported; fuse the systems in one"
                    )
            fusions[name] = (tuple(member.spec for member in members), system.fusion)
            retrieve += [member.spec for member in members]
    except HarnessError as exc:
        raise _usage(str(exc)) from None
    return PoolSystems(tuple(listed), tuple(dict.fromkeys(retrieve)), fusions)


def check_retrievable(dataset, systems: PoolSystems, depth: int) -> list:
    """The `EvaluateConfig` of each system to retrieve with, each checked as `evaluate` checks it (settings,
    the model and reranker on this machine) before any retrieval starts.

    Each system retrieves as `evaluate` and `bench` do by default (100 documents, or `depth` when deeper; a
    reranked system its rerank depth), not just the pool's `depth`: a ranking's first `depth` are the same at any
    depth (`harness.records.top_scores`), but a fusion of its members' top 100 is not the fusion of their top
    `depth`, and the pool must hold the fused top `depth` that `fuse` and `bench` score.

    Raises:
        HarnessError (usage): The first system that cannot run, named.
    """
    from harness.pipeline.config import EvaluateConfig
    from harness.pipeline.evaluate import checked
    from harness.pipeline.systems import configure, parse_system

    base = EvaluateConfig(dataset_path=dataset, top_k=None, k_values=(depth,), output_dir=None, download=False)
    configs = []
    for spec in systems.retrieve:
        try:
            system = parse_system(spec)
            if not system.stage.kind.retrieves:
                raise HarnessError(f"{system.stage.kind.what} is not retrieved; give its file with --runs")
            configs.append(checked(configure(system, base))[0])
        except HarnessError as exc:
            raise _usage(f"--systems {spec!r}: {exc} (nothing retrieved)") from None
    return configs


def pick_members(systems: PoolSystems, loaded: Sequence[tuple[object, Run]]) -> None:
    """Refuse, before anything is pooled, a fusion member that names none of the run files (by tag or file
    name, as `harness.judging.pool.pick_runs` matches them).

    Raises:
        HarnessError (usage): Naming the member, the fusion and the runs there are.
    """
    names = {name for path, run in loaded for name in (run.name, path.name, path.stem, str(path))}
    for fused, (members, _) in systems.fusions.items():
        for member in members:
            if member not in names:
                runs = ", ".join(f"{run.name} ({path.name})" for path, run in loaded)
                raise _usage(
                    f"--systems {fused!r}: fusion member {member!r} is none of the runs ({runs}); add "
                    "its run file, or fuse runs that are there (nothing pooled)"
                )


def fused_runs(systems: PoolSystems, runs: Mapping[str, Run]) -> list[tuple[str, Run]]:
    """(name, run) of each listed system, in order: a retrieved run, or the fusion of its members' runs."""
    out = []
    for name, spec in systems.listed:
        if name in systems.fusions:
            members, fusion = systems.fusions[name]
            run = fuse([runs[member] for member in members], fusion, name)
        else:
            run = runs[spec]
        out.append((name, run))
    return out
