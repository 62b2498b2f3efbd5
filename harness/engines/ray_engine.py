"""Encoding a corpus on a Ray cluster: shards in, embedding chunks into the shared cache out.

The driver (the process running ``evaluate``) streams the corpus as it always does and cuts it into
shards, each one chunk of the embedding cache (`harness.io.cache`). Ray actors — one model load each —
encode a shard exactly as the local engine encodes a chunk (`harness.retrieval.encode.encode_corpus`: same
order, same batches) and write it into the same content-addressed cache entry; the driver reads the
finished chunks back in corpus order and builds the index from them. So:

* the results equal the local engine's (vectors to float tolerance, metrics exactly), and an entry
  written by a cluster is a cache hit for a laptop and the other way round;
* a rerun after a failure re-encodes only the shards that are not in the cache yet;
* the cache directory must be on a filesystem every node mounts (NFS, a shared volume); a worker
  that cannot see it stops the run with an error that says so, before any encoding;
* the driver needs the dataset and the model (it encodes the queries, and checks that every worker
  loaded the same weights); workers need beir-harness and the model, not the dataset: shard texts
  travel through Ray's object store.

Only a bounded number of shards is in flight (one per actor), so the driver's memory does not grow
with the corpus. Needs the ``[ray]`` extra: ``pip install 'beir-harness[ray]'``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from harness.engines import SEARCH_PLACES
from harness.engines.shards import EncodeJob, FanOut, ShardEncoder
from harness.errors import HarnessError, MissingDependencyError, setting
from harness.host import environment_variables
from harness.records import Doc
from harness.retrieval.encode import Encoder

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class RaySpec:
    """Where the Ray engine runs and how it cuts the corpus.

    Attributes:
        address: A running cluster: ``auto`` (the one ``ray start`` made on this machine),
            ``HOST:PORT`` (its GCS) or ``ray://HOST:10001`` (Ray Client). None and no
            `local_cpus`: Ray's default (``$RAY_ADDRESS``, else a new local cluster).
        local_cpus: Start a private local cluster with this many CPUs for this run.
        shards: Cut the corpus into about this many shards; None: one shard per chunk of the
            run's chunk size (the local engine's batches exactly). Other shard sizes change which
            texts share a batch, which moves ``onnx-int8`` vectors slightly (its activation scales
            are per batch); fp32 vectors only by float rounding.
        gpus_per_worker: GPUs each actor asks Ray for (fractions pack several actors on one GPU,
            e.g. 0.5); each actor encodes on the GPU Ray assigned it. None: CPU actors. The driver
            needs no GPU.
        search: Where a flat index is searched: ``sharded`` — on the workers, each over a shard of the
            cached vectors, merged on the driver (`harness.engines.ray_search`; the driver never holds
            the corpus vectors); ``driver`` — one in-memory index on the driver.
    """

    address: str | None = None
    local_cpus: int | None = None
    shards: int | None = None
    gpus_per_worker: float | None = None
    search: str = "sharded"

    def check(self) -> None:
        """Raise HarnessError for contradictory or out-of-range settings."""
        if self.address is not None and self.local_cpus is not None:
            raise HarnessError(
                f"give either {setting('address')} (a running cluster) or {setting('local_cpus')} (a new one), not both"
            )
        if self.local_cpus is not None and self.local_cpus <= 0:
            raise HarnessError(f"{setting('local_cpus')} must be a positive number of CPUs, got {self.local_cpus}")
        if self.shards is not None and self.shards <= 0:
            raise HarnessError(f"{setting('shards')} must be positive, got {self.shards}")
        if self.search not in SEARCH_PLACES:
            raise HarnessError(f"{setting('ray_search')} {self.search!r}: use one of {', '.join(SEARCH_PLACES)}")
        if self.gpus_per_worker is not None and not 0 < self.gpus_per_worker <= 64:
            raise HarnessError(f"ray_gpus_per_worker must be in (0, 64], got {self.gpus_per_worker}")
        if self.gpus_per_worker is not None and self.gpus_per_worker > 1:
            # Refused rather than half used: an actor's model runs on one GPU, the rest would idle reserved.
            raise HarnessError(
                f"ray_gpus_per_worker {self.gpus_per_worker:g}: an actor encodes on one GPU, so the "
                "others would sit reserved and idle; use 1 (one actor per GPU: the same GPUs, all "
                "busy) or a fraction such as 0.5 (several actors per GPU)"
            )


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError("the ray engine needs Ray: pip install 'beir-harness[ray]'") from exc
    return ray


def shard_size(n_lines: int, shards: int) -> int:
    """Documents per shard for about `shards` shards of a corpus of `n_lines` lines."""
    return max(1, math.ceil(n_lines / shards))


def _probe(address: str) -> None:
    """Fail fast on an address nothing listens on (Ray itself retries for minutes)."""
    target = address.removeprefix("ray://")
    if address == "auto" or ":" not in target:
        return  # Ray resolves "auto" itself, and quickly reports when no cluster runs here
    host, _, port = target.rpartition(":")
    if not port.isascii() or not port.isdigit():
        raise HarnessError(f"{setting('address')} {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise HarnessError(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}); start it with "
            "`ray start --head` or check --ray-address"
        ) from None


# A cluster started here (--ray-local) stays on this machine. Ray would otherwise take as node address the
# interface it routes 8.8.8.8 through (a UDP connect to 8.8.8.8 in the driver and its agents), and every
# component would talk over that interface; its dashboard process asks AWS/Azure/GCP metadata servers
# (169.254.169.254, metadata.google.internal: a DNS query) which cloud it is on, even with usage
# statistics off and with no setting to stop it. So, for the processes the cluster starts:
LOCAL_CLUSTER_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",  # no usage statistics
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node address 127.0.0.1: Ray's "single-machine only" mode
    # Plain-HTTP requests go to a closed loopback port, so the metadata probe fails at once, on this
    # machine; Ray's own HTTP between its processes (all on 127.0.0.1) bypasses it. Workers get the
    # user's proxy settings back (LOCAL_CLUSTER_ENV is for the cluster's own processes only).
    "http_proxy": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost,::1",
    # Ray starts its workers at nice 15: on a machine busy with other work, the encoders (the run's whole work, which
    # the driver only waits for) would all but stop. A cluster started for this run runs them at its own priority.
    "RAY_worker_niceness": "0",
}
LOOPBACK = "127.0.0.1"


@contextmanager
def _loopback_cluster_env(ray: Any) -> Iterator[dict[str, str]]:
    """While a local cluster starts: LOCAL_CLUSTER_ENV in os.environ (its processes inherit it), and the
    single-machine mode in this process's Ray, which read it at import. Yields the variables the workers
    must get back (the user's own proxy settings)."""
    user = {name: os.environ.get(name) or os.environ.get(name.upper()) or "" for name in ("http_proxy", "no_proxy")}
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    single_machine = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if single_machine is None:  # a Ray without the switch: its node address may be the machine's own
        logger.warning(
            "this Ray version has no single-machine switch; the local cluster may use this "
            "machine's network address rather than 127.0.0.1"
        )
    else:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        with environment_variables(LOCAL_CLUSTER_ENV):
            yield user
    finally:
        if single_machine is not None:
            constants.ENABLE_RAY_CLUSTER = single_machine


def start_local_cluster(ray: Any, cpus: int, **options: Any) -> None:
    """Start a new private Ray cluster on this machine bound to 127.0.0.1, with no usage statistics and
    no cloud probes (LOCAL_CLUSTER_ENV): nothing it starts leaves the loopback interface."""
    runtime_env = dict(options.pop("runtime_env", None) or {})  # the caller's, plus the user's own environment
    with _loopback_cluster_env(ray) as user_env:
        runtime_env["env_vars"] = {**user_env, **runtime_env.get("env_vars", {})}
        ray.init(
            address="local",
            num_cpus=cpus,
            _node_ip_address=LOOPBACK,
            dashboard_host=LOOPBACK,
            runtime_env=runtime_env,
            **options,
        )


def connect(spec: RaySpec) -> bool:
    """Join (or start) the cluster `spec` names; True when this call started Ray and must shut it down."""
    ray = _ray()
    spec.check()
    if spec.address is not None:
        _probe(spec.address)
    if ray.is_initialized():
        return False  # the caller's own Ray session (a notebook, a test): use it, leave it running
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    try:
        if spec.local_cpus is not None:
            start_local_cluster(ray, spec.local_cpus, **options)
        else:
            ray.init(address=spec.address, **options)
    except HarnessError:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
        raise HarnessError(
            f"cannot join the Ray cluster at {spec.address or 'the default address'} "
            f"({type(exc).__name__}: {str(exc)[:300]})"
        ) from None
    return True


@contextmanager
def session(spec: RaySpec) -> Iterator[None]:
    """The cluster `spec` names, joined (or started) for the whole block and left (shut down) after it, so
    the steps of one run inside it share one session."""
    started = connect(spec)
    try:
        yield
    finally:
        if started:
            _ray().shutdown()


def _actor_count(resources: dict[str, float], gpus_per_worker: float | None) -> tuple[int, dict[str, float]]:
    """How many actors the cluster can run at once, and what each asks for.

    Raises:
        HarnessError: GPUs are asked for and the cluster has none (or fewer than one actor needs):
            fail now, rather than wait forever for a resource that never comes.
    """
    cpus = int(resources.get("CPU", 1))
    if not gpus_per_worker:
        return max(1, cpus), {"num_cpus": 1}
    gpus = resources.get("GPU", 0)
    if gpus < gpus_per_worker:
        raise HarnessError(
            f"ray_gpus_per_worker {gpus_per_worker:g} asks for GPUs, but the Ray cluster has "
            f"{gpus:g} (resources: {', '.join(f'{k} {v:g}' for k, v in sorted(resources.items()) if k in ('CPU', 'GPU'))}); "
            "add GPU nodes or drop --ray-gpus-per-worker"
        )
    return max(1, min(int(gpus // gpus_per_worker), cpus)), {"num_cpus": 1, "num_gpus": gpus_per_worker}


def _on_assigned_device(load: Callable[..., Encoder], precision: str) -> Encoder:
    """Inside an actor: check the device and the precision here, where the model runs (not on the driver,
    which may have no GPU), then load the model on the GPU Ray assigned (``cuda:0`` in the actor's view:
    Ray sets ``CUDA_VISIBLE_DEVICES`` to it)."""
    import torch

    from harness.retrieval.devices import DeviceSpec

    gpus = list(_ray().get_gpu_ids())
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        logger.warning("Ray assigned GPU(s) %s but torch sees no CUDA device here; encoding on the CPU", gpus)
    try:
        DeviceSpec(device, precision).resolve(torch)
    except HarnessError as exc:
        raise HarnessError(f"on Ray worker {socket.gethostname()} (Ray GPU(s) {gpus}, {device}): {exc}") from None
    return load(device)


def _failure(ray: Any, exc: BaseException) -> str:
    """Why a shard failed, in one line: the worker's own HarnessError when there is one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, HarnessError):
        return str(cause)
    if isinstance(exc, ray.exceptions.RayActorError):
        cause = re.sub(r"\x1b\[[0-9;]*m", "", getattr(exc, "error_msg", "") or str(exc)).strip()
        return "the worker died (" + (cause.splitlines() or [""])[0][:300] + ")"
    text = str(cause or exc).strip().splitlines()
    return text[-1][:300] if text else type(exc).__name__


def _start_actors(ray, job: EncodeJob, spec: RaySpec, actors: list[Any]) -> None:
    """Start one ShardEncoder actor per worker slot into `actors` (kept there even when one fails to start,
    so the caller kills them all) and wait until each has loaded the model."""
    count, resources = _actor_count(ray.cluster_resources(), spec.gpus_per_worker)
    remote = ray.remote(max_restarts=0, **resources)(ShardEncoder)
    # A non-default precision is part of the fingerprint's settings (fp32 is left out of it).
    precision = (job.fingerprint or {}).get("precision", "fp32")
    on_worker = partial(_on_assigned_device, job.load, precision) if spec.gpus_per_worker else job.load
    actors.extend(remote.remote(on_worker, job.entry, job.fingerprint) for _ in range(count))
    try:
        hosts = ray.get([actor.ready.remote() for actor in actors])
    except Exception as exc:  # noqa: BLE001 - the actor's constructor failed on a worker
        raise HarnessError(f"a Ray worker could not start: {_failure(ray, exc)}") from None
    job.workers.extend(sorted(hosts))  # each actor's host, Ray GPUs and device: what the result records
    logger.info("Ray engine: %d workers on %s", len(actors), ", ".join(sorted(set(hosts))))


def encode_corpus_ray(
    job: EncodeJob,
    docs: Iterator[Doc],
    spec: RaySpec,
    progress: bool = True,
    cached: Callable[[int, list[str]], bool] | None = None,
) -> Iterator[tuple[list[str], np.ndarray, float]]:
    """Encode a document stream on Ray, shard by shard, into `job.entry`.

    Args:
        job: The model, its fingerprint, the cache entry (on a filesystem every node sees), the
            shard (= chunk) size, batch size, checkpoint interval and token budget.
        docs: The document stream (read by the driver only).
        spec: Which cluster, and the GPUs each actor asks for.
        progress: A tqdm bar over documents on stderr.
        cached: Called with (shard index, doc_ids); True when that shard is already in the entry.

    Yields:
        (doc_ids, vectors, seconds the driver waited for them) per shard, in corpus order; the
        vectors are read back from the cache, so what the index gets is what the cache holds.

    Raises:
        HarnessError: The cluster cannot be reached, a worker cannot see the cache or loads a
            different model, or a shard failed (named, with the reason). Finished shards stay
            in the cache and a rerun resumes from them.
    """
    from tqdm.auto import tqdm

    ray = _ray()
    entry = job.entry
    if not entry.writable:
        raise HarnessError(f"the Ray engine writes embeddings into the cache, but {entry.root} is not writable")
    started_ray = connect(spec)
    bar = tqdm(desc="encoding corpus (ray)", unit="doc", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    actors: list[Any] = []
    idle: list[Any] = []
    in_flight: dict[Any, tuple[int, list[str], Any]] = {}
    fan = FanOut(entry, job.chunk_size, bar, noun="shard", where=" on a Ray worker")

    def collect(block: bool) -> None:
        if not in_flight:
            return
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=None if block else 0)
        for ref in ready:
            index, doc_ids, actor = in_flight.pop(ref)
            try:
                rows, _ = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - RayTaskError / RayActorError and their kin
                reason = _failure(ray, exc)
                _drain()
                raise fan.failed(index, len(doc_ids), reason) from None
            fan.done(index, doc_ids, rows)
            idle.append(actor)

    def _drain() -> None:
        """Let the other shards in flight finish, so their work is kept."""
        for ref in list(in_flight):
            try:
                ray.get(ref)
                fan.encoded += 1
            except Exception:  # noqa: BLE001 - already failing; these are best effort
                pass
        in_flight.clear()

    def submit(index: int, chunk: list[Doc], doc_ids: list[str]) -> None:
        if not actors:
            _start_actors(ray, job, spec, actors)
            idle.extend(actors)
        while not idle:  # at most one shard in flight per actor
            collect(True)
        actor = idle.pop()
        in_flight[actor.encode.remote(index, chunk, job.batch_size, job.checkpoint_seconds, job.token_budget)] = (
            index,
            doc_ids,
            actor,
        )

    try:
        yield from fan.stream(docs, cached, submit, collect, lambda: bool(in_flight))
        if fan.cached:
            logger.info("Ray engine: %d shard(s) from the cache, %d encoded", fan.cached, fan.encoded)
    finally:
        bar.close()
        for actor in actors:
            ray.kill(actor)
        if started_ray:
            ray.shutdown()
