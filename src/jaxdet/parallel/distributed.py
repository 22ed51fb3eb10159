"""Start ``jax.distributed`` for a run over several processes (hosts), once, before any JAX work.

Where the three numbers come from, first found wins, field by field:

1. explicit arguments (the CLI's ``--coordinator-address``, ``--num-processes``,
   ``--process-id``);
2. environment variables ``JAXDET_COORDINATOR_ADDRESS`` / ``JAX_COORDINATOR_ADDRESS``,
   ``JAXDET_NUM_PROCESSES`` / ``JAX_NUM_PROCESSES``, ``JAXDET_PROCESS_ID`` / ``JAX_PROCESS_ID``
   (JAX itself reads only ``JAX_COORDINATOR_ADDRESS``);
3. the cluster, detected by ``jax.distributed.initialize`` itself (jax/_src/clusters): SLURM
   (``srun``: ``SLURM_NTASKS``, ``SLURM_PROCID``, the first node of ``SLURM_STEP_NODELIST``,
   port from the job id or ``JAX_COORDINATOR_PORT``; task ``SLURM_LOCALID`` gets that GPU),
   Cloud TPU VMs and GKE TPU pods (metadata server / ``TPU_WORKER_HOSTNAMES``), Open MPI
   (``mpirun``), Kubernetes.

Nothing is started (one process, the usual laptop / single-host case) unless one of these says
there are several processes: an explicit number > 1, any of the variables of 2., a SLURM step
of more than one task, an Open MPI job of more than one rank, a TPU pod's worker list, a Cloud
TPU VM (JAX asks the metadata server for the slice's hosts; one host is a 1-process run), or
``force=True`` (the CLI's ``--distributed``: let JAX detect everything, e.g. Kubernetes).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping

import jax

log = logging.getLogger("jaxdet")

ADDRESS_VARS = ("JAXDET_COORDINATOR_ADDRESS", "JAX_COORDINATOR_ADDRESS")
COUNT_VARS = ("JAXDET_NUM_PROCESSES", "JAX_NUM_PROCESSES")
ID_VARS = ("JAXDET_PROCESS_ID", "JAX_PROCESS_ID")


class DistributedError(RuntimeError):
    """The multi-process settings are inconsistent, or the processes could not connect."""


@dataclasses.dataclass(frozen=True)
class DistributedSpec:
    """What ``initialize`` will pass to ``jax.distributed.initialize`` (None: JAX detects it).

    ``origin`` says where the settings came from, for log lines and errors.
    """

    coordinator_address: str | None
    num_processes: int | None
    process_id: int | None
    origin: str


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str | None, str | None]:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            return value, name
    return None, None


def _as_int(value, what: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DistributedError(f"{what} must be an integer, got {value!r}") from None


def _env_int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env.get(name, "") or 0)
    except ValueError:
        return 0


def _detected_cluster(env: Mapping[str, str]) -> str | None:
    """A multi-process cluster launch visible in the environment (cheap checks only)."""
    if "SLURM_JOB_ID" in env and "SLURM_PROCID" in env and _env_int(env, "SLURM_NTASKS") > 1:
        return f"SLURM job {env['SLURM_JOB_ID']} ({env['SLURM_NTASKS']} tasks)"
    if "OMPI_MCA_orte_hnp_uri" in env and _env_int(env, "OMPI_COMM_WORLD_SIZE") > 1:
        return f"Open MPI ({env['OMPI_COMM_WORLD_SIZE']} ranks)"
    workers = env.get("TPU_PROCESS_ADDRESSES") or env.get("TPU_WORKER_HOSTNAMES") or ""
    if "," in workers:
        return f"TPU pod ({workers.count(',') + 1} workers)"
    return None


def tf_config_processes(environ: Mapping[str, str] | None = None
                        ) -> tuple[str, int, int] | None:
    """(coordinator address, process count, this process's id) from ``TF_CONFIG``, the
    cluster description TF's ``MultiWorkerMirroredStrategy`` reads
    (``{"cluster": {"chief": [...], "worker": ["host:port", ...]}, "task": {"type":
    "worker", "index": 1}}``): processes are the chief (if any) then the workers in order,
    process 0 (the chief, else worker 0) coordinates on its own ``host:port``. None without
    ``TF_CONFIG``. Raises DistributedError for one jaxdet cannot use (bad JSON, no workers,
    a task of another type, e.g. TF's ``evaluator`` or ``ps``)."""
    import json

    env = os.environ if environ is None else environ
    text = env.get("TF_CONFIG", "")
    if not text.strip():
        return None
    try:
        spec = json.loads(text)
        cluster, task = spec["cluster"], spec["task"]
        kind, index = str(task["type"]), int(task.get("index", 0))
    except (ValueError, KeyError, TypeError) as err:
        raise DistributedError(f"TF_CONFIG is not a TF cluster spec ({err}): expected "
                               '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": '
                               '"worker", "index": 0}}') from None
    chiefs, workers = list(cluster.get("chief", [])), list(cluster.get("worker", []))
    hosts = chiefs + workers
    if not hosts:
        raise DistributedError("TF_CONFIG's cluster lists no chief or worker")
    if kind not in ("chief", "worker"):
        raise DistributedError(f"TF_CONFIG task type {kind!r}: jaxdet's processes all train "
                               "(chief and workers); an evaluator runs `model_main_tf2 "
                               "--checkpoint_dir` without TF_CONFIG")
    process_id = index if kind == "chief" else len(chiefs) + index
    if not 0 <= process_id < len(hosts):
        raise DistributedError(f"TF_CONFIG task {kind} {index}: the cluster has "
                               f"{len(chiefs)} chief(s) and {len(workers)} worker(s)")
    return str(hosts[0]), len(hosts), process_id


def _on_cloud_tpu_vm() -> bool:
    """True on a Cloud TPU VM (set by ``import jax`` when it finds TPU chips and libtpu)."""
    try:
        from jax._src import cloud_tpu_init
    except ImportError:  # pragma: no cover - private module moved
        return False
    return bool(getattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False))


def resolve(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    force: bool = False,
    environ: Mapping[str, str] | None = None,
) -> DistributedSpec | None:
    """The settings of a multi-process run, or None for a single process (nothing to start).

    Raises:
      DistributedError: a setting is not an integer, ``num_processes < 1``, ``process_id`` not in
        ``[0, num_processes)``, an address without ``host:port``, or several processes
        requested without a coordinator address or a process id and no cluster to detect
        them from.
    """
    env = os.environ if environ is None else environ
    origin: list[str] = []

    def setting(flag_value, flag: str, env_names: tuple[str, ...], convert):
        """The flag's value, else the first set environment variable; records where from."""
        if flag_value is None:
            flag_value, flag = _first(env, env_names)
            if flag is None:
                return None
        origin.append(flag)
        return convert(flag_value, flag)

    coordinator_address = setting(coordinator_address, "--coordinator-address", ADDRESS_VARS,
                                  lambda value, _: value)
    num_processes = setting(num_processes, "--num-processes", COUNT_VARS, _as_int)
    process_id = setting(process_id, "--process-id", ID_VARS, _as_int)

    cluster = _detected_cluster(env)
    if cluster is None and environ is None and _on_cloud_tpu_vm():
        cluster = "Cloud TPU VM (hosts from the TPU metadata)"
    if num_processes is not None and num_processes < 1:
        raise DistributedError(f"the number of processes must be >= 1, got {num_processes}")
    if num_processes == 1 and process_id not in (None, 0):
        raise DistributedError(f"process id {process_id} is out of range for 1 process")
    if num_processes == 1:
        return None  # explicitly one process: nothing to coordinate
    if not (origin or cluster or force):
        return None
    if num_processes is not None and process_id is not None \
            and not 0 <= process_id < num_processes:
        raise DistributedError(
            f"process id {process_id} is out of range for {num_processes} processes: ids run "
            f"from 0 to {num_processes - 1} (process 0 hosts the coordinator)"
        )
    if coordinator_address is not None:
        host, sep, port = coordinator_address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise DistributedError(
                f"coordinator address {coordinator_address!r} is not HOST:PORT (e.g. "
                "10.0.0.1:1234, the address of process 0 and a free port)"
            )
    if not (cluster or force) and None in (coordinator_address, num_processes, process_id):
        missing = [flag for flag, v in (("--coordinator-address", coordinator_address),
                                        ("--num-processes", num_processes),
                                        ("--process-id", process_id)) if v is None]
        raise DistributedError(
            f"a multi-process run was asked for ({', '.join(origin)}) but {', '.join(missing)} "
            "is missing and no cluster (SLURM, TPU pod, Open MPI) was detected to supply it; "
            "give all three (or the JAXDET_* variables), or pass --distributed to let "
            "jax.distributed detect them"
        )
    where = ", ".join(origin + ([cluster] if cluster else []) + (["--distributed"] if force
                                                                 and not origin else []))
    return DistributedSpec(coordinator_address, num_processes, process_id, where)


def wait_for_coordinator(address: str, timeout_s: float, *, who: str = "this process") -> None:
    """Block until ``address`` (HOST:PORT) accepts TCP connections, trying every 0.5 s.

    JAX's own client aborts the whole process (a C++ fatal error, no Python exception) when it
    cannot reach the coordinator, so processes other than 0 check first and fail with a message.

    Raises:
      DistributedError: not reachable within ``timeout_s``.
    """
    import socket
    import time

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2.0):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise DistributedError(
                    f"{who} could not reach the coordinator at {address} within {timeout_s:g} s "
                    f"({err.strerror or err}). Is process 0 running, started with the same "
                    "--coordinator-address, and is the port open between the hosts?"
                ) from None
            time.sleep(0.5)


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    force: bool = False,
    timeout_s: int = 300,
) -> bool:
    """Start ``jax.distributed`` if this is one of several processes; True if it started.

    Call once, before any JAX computation (also before ``jax.devices()``). A no-op returning
    False for a single process, and when ``jax.distributed`` is already running.

    Args:
      coordinator_address: ``HOST:PORT`` of process 0 (it binds that port; the others connect).
      num_processes, process_id: this run's process count and this process's id.
      force: start even without any setting or detected cluster (JAX's own auto-detection).
      timeout_s: how long to wait for every process to reach the coordinator.
    Raises:
      DistributedError: bad settings (see :func:`resolve`), JAX already computing, or the
        coordinator not reached within ``timeout_s``.
    """
    if jax.distributed.is_initialized():
        return False
    spec = resolve(coordinator_address, num_processes, process_id, force=force)
    if spec is None:
        return False
    from jax._src import xla_bridge  # the public initialize raises the same, less clearly

    if xla_bridge.backends_are_initialized():
        raise DistributedError(
            "jax.distributed must start before any JAX computation, but JAX is already running "
            "in this process; call jaxdet.parallel.distributed.initialize first"
        )
    who = (f"process {spec.process_id if spec.process_id is not None else '?'} of "
           f"{spec.num_processes if spec.num_processes is not None else '?'}")
    at = spec.coordinator_address or "(detected)"
    log.info("starting jax.distributed: %s, coordinator %s (from %s); waiting up to %d s for "
             "every process", who, at, spec.origin, timeout_s)
    if spec.coordinator_address is not None and spec.process_id not in (None, 0):
        wait_for_coordinator(spec.coordinator_address, timeout_s, who=who)
    try:
        jax.distributed.initialize(
            coordinator_address=spec.coordinator_address,
            num_processes=spec.num_processes,
            process_id=spec.process_id,
            initialization_timeout=int(timeout_s),
        )
    except (ValueError, TypeError) as err:  # JAX's own checks after cluster detection
        raise DistributedError(f"cannot start jax.distributed ({spec.origin}): {err}") from err
    except Exception as err:  # noqa: BLE001 - XlaRuntimeError, where JAX raises rather than aborts
        raise DistributedError(
            f"{who} could not join the coordinator at {at} within {timeout_s} s "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}). "
            "Check that every process was started with the same address and process count, "
            "that process 0 is running, and that the port is open between the hosts"
        ) from err
    log.info("jax.distributed up: process %d of %d, %d local / %d global devices",
             jax.process_index(), jax.process_count(), jax.local_device_count(),
             jax.device_count())
    return True


def is_main_process() -> bool:
    """True on process 0, the one that prints progress and writes logs."""
    return jax.process_index() == 0


__all__ = ["DistributedError", "DistributedSpec", "initialize", "is_main_process", "resolve",
           "tf_config_processes", "wait_for_coordinator"]
