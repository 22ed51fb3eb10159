"""Where a multi-process run's settings come from (flags, JAXDET_/JAX_ variables, SLURM / TPU
pod / Open MPI detection), the errors for bad ones, and the CLI flags that carry them."""

import re

import pytest

from jaxdet.cli import main as cli
from jaxdet.parallel import distributed
from jaxdet.parallel.distributed import DistributedError, DistributedSpec, resolve

SLURM = {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "gpu[001-004]", "SLURM_NTASKS": "8",
         "SLURM_PROCID": "3", "SLURM_LOCALID": "1"}


def test_single_process_is_a_no_op(monkeypatch):
    assert resolve(environ={}) is None
    assert resolve(num_processes=1, environ={}) is None
    assert resolve(environ={**SLURM, "SLURM_NTASKS": "1"}) is None  # a one-task SLURM job
    assert resolve(environ={"TPU_WORKER_HOSTNAMES": "localhost"}) is None  # one TPU host
    for name in [*distributed.ADDRESS_VARS, *distributed.COUNT_VARS, *distributed.ID_VARS,
                 *SLURM, "OMPI_MCA_orte_hnp_uri", "TPU_WORKER_HOSTNAMES",
                 "TPU_PROCESS_ADDRESSES"]:
        monkeypatch.delenv(name, raising=False)
    assert distributed.initialize() is False  # nothing set: jax.distributed is not started


def test_flags_win_over_the_environment():
    env = {"JAXDET_COORDINATOR_ADDRESS": "envhost:1", "JAXDET_NUM_PROCESSES": "4",
           "JAXDET_PROCESS_ID": "3"}
    spec = resolve("10.0.0.1:1234", 2, 1, environ=env)
    assert spec == DistributedSpec("10.0.0.1:1234", 2, 1,
                                   "--coordinator-address, --num-processes, --process-id")
    spec = resolve(environ=env)
    assert (spec.coordinator_address, spec.num_processes, spec.process_id) == ("envhost:1", 4, 3)
    jax_env = {"JAX_COORDINATOR_ADDRESS": "h:9", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}
    assert resolve(environ=jax_env).origin == \
        "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID"


def test_clusters_are_detected_and_left_to_jax():
    spec = resolve(environ=SLURM)  # jax.distributed reads SLURM_* itself
    assert (spec.coordinator_address, spec.num_processes, spec.process_id) == (None, None, None)
    assert "SLURM job 4242 (8 tasks)" in spec.origin
    spec = resolve(environ={"TPU_WORKER_HOSTNAMES": "t0,t1,t2,t3", "TPU_WORKER_ID": "2"})
    assert "TPU pod (4 workers)" in spec.origin
    spec = resolve(environ={"OMPI_MCA_orte_hnp_uri": "x", "OMPI_COMM_WORLD_SIZE": "2"})
    assert "Open MPI (2 ranks)" in spec.origin
    # explicit values fill in what the cluster would, the rest is still detected
    spec = resolve(num_processes=8, environ=SLURM)
    assert (spec.num_processes, spec.process_id) == (8, None)
    assert resolve(force=True, environ={}).origin == "--distributed"


@pytest.mark.parametrize("args, env, match", [
    (("h:1", 2, 2), {}, "process id 2 is out of range for 2 processes: ids run from 0 to 1"),
    (("h:1", 2, -1), {}, "process id -1 is out of range"),
    ((None, 1, 1), {}, "process id 1 is out of range for 1 process"),
    (("h:1", 0, 0), {}, "number of processes must be >= 1"),
    (("10.0.0.1", 2, 0), {}, "'10.0.0.1' is not HOST:PORT"),
    ((None, 2, 0), {}, "--coordinator-address is missing and no cluster"),
    (("h:1", None, None), {}, "--num-processes, --process-id is missing"),
    ((None, None, None), {"JAXDET_NUM_PROCESSES": "two"}, "JAXDET_NUM_PROCESSES must be an int"),
])
def test_bad_settings_are_clear_errors(args, env, match):
    with pytest.raises(DistributedError, match=match):
        resolve(*args, environ=env)


def test_cli_train_takes_the_flags(monkeypatch):
    args = cli._parser().parse_args([
        "train", "--config", "shapes_demo", "--workdir", "w", "--coordinator-address",
        "10.0.0.1:1234", "--num-processes", "4", "--process-id", "2",
        "--distributed-timeout", "30"])
    seen = {}

    def fake_initialize(*a, **kw):
        seen.update(args=a, **kw)
        return False

    monkeypatch.setattr(distributed, "initialize", fake_initialize)
    assert cli._start_distributed(args) is False
    assert seen == {"args": ("10.0.0.1:1234", 4, 2), "force": False, "timeout_s": 30}
    forced = cli._parser().parse_args(["train", "--config", "x", "--workdir", "w",
                                       "--distributed"])
    assert forced.distributed and forced.process_id is None


def test_cli_reports_a_bad_process_id(capsys, tmp_path):
    code = cli.main(["train", "--config", "shapes_demo", "--workdir", str(tmp_path),
                     "--coordinator-address", "localhost:1", "--num-processes", "2",
                     "--process-id", "5"])
    assert code == 1
    assert "process id 5 is out of range for 2 processes" in capsys.readouterr().err


def test_unreachable_coordinator_is_a_clear_error():
    """JAX's client would abort the process (C++ fatal error); the check before it raises."""
    import socket

    with socket.socket() as server:
        server.bind(("localhost", 0))
        port = server.getsockname()[1]
        server.listen()
        distributed.wait_for_coordinator(f"localhost:{port}", 1.0)  # reachable: returns
    with pytest.raises(DistributedError, match=rf"process 1 of 2 could not reach the "
                       rf"coordinator at localhost:{port} within 0.6 s"):
        distributed.wait_for_coordinator(f"localhost:{port}", 0.6, who="process 1 of 2")


def test_tf_config_names_the_processes_as_multi_worker_mirrored_strategy_does():
    import json

    cluster = {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"]}

    def spec(task):
        return distributed.tf_config_processes(
            {"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})})

    assert spec({"type": "chief", "index": 0}) == ("c0:2222", 3, 0)
    assert spec({"type": "worker", "index": 1}) == ("c0:2222", 3, 2)  # after the chief
    workers_only = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]},
                                             "task": {"type": "worker", "index": 1}})}
    assert distributed.tf_config_processes(workers_only) == ("a:1", 2, 1)
    assert distributed.tf_config_processes({}) is None
    for bad, said in (("{not json", "TF_CONFIG is not a TF cluster spec"),
                      (json.dumps({"cluster": cluster, "task": {"type": "evaluator"}}),
                       "task type 'evaluator'"),
                      (json.dumps({"cluster": cluster, "task": {"type": "worker",
                                                                "index": 5}}),
                       "the cluster has 1 chief(s) and 2 worker(s)")):
        with pytest.raises(DistributedError, match=re.escape(said)):
            distributed.tf_config_processes({"TF_CONFIG": bad})
