"""Two local CPU processes train together through jax.distributed (gloo collectives), each
reading its own half of every global batch, and end with the single-process parameters; the
run is stopped and resumed from the orbax checkpoint both processes wrote, straight into a
bucket (the GCS emulator) in the first test, into a shared folder in the second; only process
0 logs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from compile_settings import FAST_COMPILE_XLA_FLAGS
from jaxdet import files
from jaxdet.config.loader import load_config
from jaxdet.data import build as data_build
from jaxdet.data.loader import SHARDED_STATE_FORMAT, gather_ints
from jaxdet.jobs import runs
from jaxdet.train.checkpoint import Checkpointer

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("multiprocess")]

WORKER = Path(__file__).with_name("mp_worker.py")
# SGD with momentum: Adam would magnify float-rounding differences of near-zero gradients
# (a new optimizer name starts from that optimizer's defaults: weight decay and clipping are set)
SAME = ["train.optimizer.name=momentum", "train.optimizer.weight_decay=0.0001",
        "train.optimizer.clip_gradient_norm=10.0"]


def _worker_env() -> dict[str, str]:
    """The workers' environment: CPU, and of ``XLA_FLAGS`` only the suite's fast-compile
    settings (when the suite uses them), as the in-process reference compiles."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    if os.environ.get("JAXDET_TEST_USERS_COMPILE") != "1":
        env["XLA_FLAGS"] = " ".join(FAST_COMPILE_XLA_FLAGS)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _launch(workdir: Path | str, overrides: list[str], *, num_processes: int = 2,
            stop_after: int | None = None, timeout: int = 300, out: Path | None = None,
            env: dict[str, str] | None = None) -> list[dict]:
    port = _free_port()
    env = {**_worker_env(), **(env or {})}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "--process-id", str(i), "--num-processes",
             str(num_processes), "--coordinator-address", f"localhost:{port}",
             "--workdir", str(workdir), *(["--out", str(out)] if out else []),
             *(["--stop-after", str(stop_after)] if stop_after else []),
             *[f"--set={o}" for o in overrides]],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(num_processes)
    ]
    outs = []
    try:
        for i, proc in enumerate(procs):
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, f"process {i} failed:\n{out[-3000:]}\n{err[-6000:]}"
            outs.append((out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def _params(path) -> dict:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def test_two_processes_train_in_a_bucket_like_one(tiny_overrides, tmp_path, gcs):
    """The workdir is ``gs://``: both processes write their parts of each checkpoint into
    the bucket (orbax through tensorstore), restore from it, and process 0 alone holds the
    bucket's training lock and writes the logs; each process stages the other files in its
    own folder."""
    overrides = [*tiny_overrides, *SAME]
    reference = runs.train(load_config("shapes_demo", overrides), tmp_path / "one",
                           progress=False, evaluate=False)

    workdir = f"gs://{gcs.bucket}/multiprocess/two"
    multi = [*overrides, "parallel.data=-1"]  # one device in each process: a 2 x 1 mesh
    staging = tmp_path / "staging"  # each process generates the shapes data in its own folder
    reports = _launch(workdir, multi, stop_after=4, out=tmp_path,
                      env={"JAXDET_STAGING_DIR": str(staging)})

    for i, report in enumerate(reports):
        assert report["started"] and report["process_index"] == i
        assert report["process_count"] == 2 and report["devices"] == 2
        assert report["killed_at"] == 4 and report["step"] == 6
    params = [_params(tmp_path / f"params_{i}.npz") for i in range(2)]
    want = {jax.tree_util.keystr(k): np.asarray(v) for k, v in
            jax.tree_util.tree_flatten_with_path(reference.state["params"])[0]}
    assert params[0].keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_array_equal(params[0][name], params[1][name], err_msg=name)
        np.testing.assert_allclose(params[0][name], value, rtol=1e-5, atol=1e-6, err_msg=name)

    # one log, by process 0: steps 1-4 by the killed run; after the resume from 3 its step-4
    # row is replaced by the recomputed one, then 5, 6: each step once
    lines = [json.loads(x) for x in files.read_text(f"{workdir}/metrics.jsonl").splitlines()]
    train = [x for x in lines if "train/loss" in x["metrics"]]
    assert [x["step"] for x in train] == [1, 2, 3, 4, 5, 6]
    ref = {json.loads(x)["step"]: json.loads(x)["metrics"]["train/loss"]
           for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()}
    for x in train:
        assert x["metrics"]["train/loss"] == pytest.approx(ref[x["step"]], rel=1e-5)

    # the checkpoints, in the bucket only, hold both processes' parts and data positions
    # (global batch 4, 2 rows each)
    assert sorted(p.name for p in staging.iterdir()) == ["train", "train-process1"]
    assert not list(staging.rglob("checkpoints"))
    parts = files.glob(f"{workdir}/checkpoints/6/state/ocdbt.process_*")
    assert sorted(p.rsplit("/", 1)[1] for p in parts) == ["ocdbt.process_0", "ocdbt.process_1"]
    assert json.loads(files.read_text(f"{workdir}/.jaxdet-train.lock"))["released"]
    with Checkpointer(f"{workdir}/checkpoints", read_only=True) as ckpt:
        assert ckpt.all_steps() == [3, 6]
        data = ckpt.read_metadata(6)["data"]
    assert data["format"] == SHARDED_STATE_FORMAT
    assert data["next_index"] == [24, 26] and data["batch_size"] == 4


def test_gather_ints_single_process():
    assert gather_ints(2**40 + 5) == [2**40 + 5]


@pytest.mark.exhaustive
def test_a_signal_to_one_process_stops_both_at_one_step(tiny_overrides, tmp_path):
    """SIGTERM to process 1 alone: both processes finish the same step, write one checkpoint
    together and return; resumed, they end with the parameters of an uninterrupted
    two-process run."""
    import signal
    import time

    overrides = [*tiny_overrides, *SAME, "parallel.data=-1", "train.num_steps=300",
                 "train.checkpoint_every=100"]
    workdir = tmp_path / "two"
    data_build.build_source(load_config("shapes_demo", overrides).data.train, workdir)
    port = _free_port()
    env = _worker_env()
    procs = [subprocess.Popen(
        [sys.executable, str(WORKER), "--process-id", str(i), "--num-processes", "2",
         "--coordinator-address", f"localhost:{port}", "--workdir", str(workdir),
         "--until-signal", *[f"--set={o}" for o in overrides]],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        log = workdir / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (log.is_file() and len(log.read_text().splitlines()) >= 3):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        procs[1].send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (_out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-4000:]
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    stops = [r["stopped"] for r in reports]
    assert stops[1]["stopped_by"] == "SIGTERM"
    assert stops[0]["stopped_by"] == "a signal to another process"
    at = stops[0]["stopped_at"]
    assert stops[1]["stopped_at"] == at and 3 <= at < 300
    assert all(r["step"] == 300 for r in reports)
    with Checkpointer(workdir / "checkpoints") as ckpt:  # (the step-`at` one kept 3 newer)
        assert ckpt.all_steps()[-1] == 300
    params = [_params(workdir / f"params_{i}.npz") for i in range(2)]
    # an uninterrupted two-process run (one process would differ after 300 steps by rounding)
    data_build.build_source(load_config("shapes_demo", overrides).data.train, tmp_path / "plain")
    _launch(tmp_path / "plain", overrides)
    want = _params(tmp_path / "plain" / "params_0.npz")
    assert params[0].keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_array_equal(params[0][name], params[1][name], err_msg=name)
        np.testing.assert_array_equal(params[0][name], value, err_msg=name)
