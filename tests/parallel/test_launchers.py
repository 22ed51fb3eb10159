"""The cluster recipes of examples/clusters, run as far as this machine allows: two CPU
processes started with the environment each scheduler gives its tasks (SLURM's variables; the
Kubernetes Indexed Job's, read from the shipped manifest), each the plain ``jaxdet train``
command, end with the parameters of one process training the same global batch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from jaxdet.config.loader import load_config
from jaxdet.data import build as data_build
from jaxdet.jobs import runs
from jaxdet.train.checkpoint import Checkpointer

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("multiprocess")]

CLUSTERS = Path(__file__).parents[2] / "examples" / "clusters"
# SGD with momentum (as test_multiprocess.py): Adam would magnify rounding differences
SAME = ["train.optimizer.name=momentum", "train.optimizer.weight_decay=0.0001",
        "train.optimizer.clip_gradient_norm=10.0"]
SLURM_PORTS = 61440  # JAX's SLURM coordinator port: 61440 + job id % 4096


def _free_port(low: int = 0) -> int:
    for port in ([0] if low == 0 else range(low, 65536)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


def _run_two(workdir: Path, overrides: list[str], envs: list[dict[str, str]]) -> None:
    """Two ``jaxdet train`` processes, process i with ``envs[i]`` added to its environment."""
    base = dict(os.environ, JAX_PLATFORMS="cpu")
    base.pop("XLA_FLAGS", None)  # one CPU device per process
    cmd = [sys.executable, "-m", "jaxdet.cli.main", "train", "--config", "shapes_demo",
           "--workdir", str(workdir), "--no-eval", "--no-progress", "--distributed-timeout",
           "60", *[f"--set={o}" for o in overrides]]
    procs = [subprocess.Popen(cmd, env={**base, **env}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for env in envs]
    try:
        for i, proc in enumerate(procs):
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"process {i}:\n{out[-2000:]}\n{err[-4000:]}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def _final_params(workdir: Path) -> dict:
    """The parameters of the run's last checkpoint as numpy arrays (written by two processes:
    read whole here, whatever the topology)."""
    import jax
    import orbax.checkpoint as ocp

    with Checkpointer(workdir / "checkpoints", read_only=True) as checkpoints:
        path = checkpoints.step_dir(checkpoints.latest_step()) / "state"
    reader = ocp.PyTreeCheckpointer()
    meta = reader.metadata(path)
    tree = getattr(getattr(meta, "item_metadata", meta), "tree", meta)
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    return reader.restore(path, args=ocp.args.PyTreeRestore(restore_args=as_numpy))["params"]


@pytest.fixture(scope="module")
def reference(tiny_overrides, tmp_path_factory):
    """The overrides of the two-process runs, and one process's parameters after them."""
    overrides = [*tiny_overrides, *SAME]
    result = runs.train(load_config("shapes_demo", overrides),
                        tmp_path_factory.mktemp("one"), progress=False, evaluate=False)
    return [*overrides, "parallel.data=-1"], result.state["params"]


def _flat(tree) -> dict[str, np.ndarray]:
    import jax

    return {"/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path):
            np.asarray(leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _check_same(workdir: Path, params: dict) -> None:
    got, want = _flat(_final_params(workdir)), _flat(params)
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def _prepared(workdir: Path, overrides: list[str]) -> Path:
    # the generated data once, before the processes start (they would race to write it)
    data_build.build_source(load_config("shapes_demo", overrides).data.train, workdir)
    return workdir


# the launchers' processes under -m exhaustive (85 s cold for both): make test keeps two
# processes training like one (test_multiprocess.py), SLURM's variables read as a cluster
# (test_distributed.py) and the launchers' shell recipes (below)
@pytest.mark.exhaustive
def test_slurm_tasks_train_like_one_process(reference, tmp_path):
    overrides, params = reference
    workdir = _prepared(tmp_path / "slurm", overrides)
    port = _free_port(SLURM_PORTS)
    slurm = {"SLURM_JOB_ID": str(port - SLURM_PORTS), "SLURM_STEP_NODELIST": "localhost",
             "SLURM_NTASKS": "2", "SLURM_STEP_NUM_NODES": "1", "SLURM_NNODES": "1"}
    _run_two(workdir, overrides, [{**slurm, "SLURM_PROCID": str(i), "SLURM_LOCALID": str(i)}
                                  for i in range(2)])
    _check_same(workdir, params)


def _indexed_job_env(index: int, port: int) -> dict[str, str]:
    """What the shipped manifest gives pod ``index``: its container's variables, the
    completion-index annotation resolved, the coordinator's host name replaced by this
    machine's address."""
    docs = list(yaml.safe_load_all((CLUSTERS / "kubernetes_indexed_job.yaml").read_text()))
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    env = {}
    for item in job["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            assert path == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            env[item["name"]] = str(index)
    host, _ = env["JAXDET_COORDINATOR_ADDRESS"].rsplit(":", 1)
    assert host == f"{job['metadata']['name']}-0.{job['spec']['template']['spec']['subdomain']}"
    env["JAXDET_COORDINATOR_ADDRESS"] = f"127.0.0.1:{port}"
    return env


@pytest.mark.exhaustive
def test_kubernetes_indexed_job_pods_train_like_one_process(reference, tmp_path):
    overrides, params = reference
    workdir = _prepared(tmp_path / "k8s", overrides)
    port = _free_port()
    _run_two(workdir, overrides, [_indexed_job_env(i, port) for i in range(2)])
    _check_same(workdir, params)


def test_the_shell_recipes_parse():
    for script in ("slurm_train.sbatch", "cloud_tpu_pod.sh", "single_node_gpus.sh"):
        done = subprocess.run(["bash", "-n", str(CLUSTERS / script)], capture_output=True,
                              text=True)
        assert done.returncode == 0, f"{script}: {done.stderr}"
