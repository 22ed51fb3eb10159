"""SIGTERM / SIGINT during training: the step in flight is finished and checkpointed, the loop
returns, the command exits 0 and resumes to the parameters of an uninterrupted run; several
processes stop at one step."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import jax.numpy as jnp
import pytest

from compile_settings import users_compile_env
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.loop import PeriodicHook, train_loop
from jaxdet.train.metrics_log import MetricsLogger
from jaxdet.train.preemption import StopSignals


class FakeStore:
    """The calls of jax.distributed's key-value client that StopSignals uses, shared by
    threads standing for processes."""

    def __init__(self):
        self.values: dict[str, str] = {}
        self.changed = threading.Condition()

    def key_value_set(self, key: str, value: str) -> None:
        with self.changed:
            if key in self.values:
                raise RuntimeError(f"ALREADY_EXISTS: {key}")
            self.values[key] = value
            self.changed.notify_all()

    def key_value_try_get(self, key: str) -> str:
        with self.changed:
            if key not in self.values:
                raise RuntimeError(f"NOT_FOUND: {key}")
            return self.values[key]

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        with self.changed:
            assert self.changed.wait_for(lambda: key in self.values, timeout_ms / 1000), key
            return self.values[key]


def _processes(store, count=2):
    return [StopSignals(process_count=count, process_index=i, kv_client=store, timeout_s=20,
                        run_id="") for i in range(count)]


def _run(stop: StopSignals, first: int, last: int, steps: list, ask_at: int | None = None):
    """A process's loop: steps first..last, asking to stop after ``ask_at``; records the step
    it stopped at."""
    for step in range(first, last + 1):
        if step == ask_at:
            stop.request("SIGTERM")
        if stop.stop_now(step):
            steps.append(step)
            return
    steps.append(None)


def test_a_signal_is_a_request_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals(process_count=1) as stop:
        assert not stop.stop_now(1)
        os.kill(os.getpid(), signal.SIGTERM)  # handled: this process goes on
        assert stop.requested == "SIGTERM" and stop.stop_now(2)
    assert signal.getsignal(signal.SIGTERM) is before
    with StopSignals(process_count=1) as stop:
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt
        assert stop.requested == "SIGINT"


def test_processes_stop_at_one_step_whichever_got_the_signal():
    """Process 0 is signalled at its step 10 while process 1 runs ahead: both stop at 13, the
    step process 1 had reached when it saw the flag."""
    store = FakeStore()
    a, b = _processes(store)
    first: list = []
    _run(b, 3, 12, first)  # b is at 12 before a is signalled: nothing asked yet
    assert first == [None]
    stopped: list = []
    behind = threading.Thread(target=_run, args=(a, 1, 50, stopped, 10))
    behind.start()  # a asks at 10, reports 10 and waits for b's report
    _run(b, 13, 50, stopped)  # b sees the flag after 13, reports it: both stop there
    behind.join(10)
    assert stopped == [13, 13]
    assert store.values["jaxdet/stop/seen/0"] == "10"
    assert store.values["jaxdet/stop/seen/1"] == "13"
    assert (a.requested, b.requested) == ("SIGTERM", "a signal to another process")


def test_both_processes_signalled_stop_at_one_step():
    store = FakeStore()
    stopped: list = []
    threads = [threading.Thread(target=_run, args=(stop, 1, 50, stopped, ask))
               for stop, ask in zip(_processes(store), (5, 7), strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(stopped) == 2 and stopped[0] == stopped[1] and 5 <= stopped[0] <= 7


def test_the_loop_checkpoints_the_step_and_skips_the_end_of_run(tmp_path):
    stop = StopSignals(process_count=1)
    evaluated = []

    def step_fn(state, batch):
        if int(state["step"]) == 2:  # the signal arrives during step 3
            stop.request("SIGTERM")
        return {"step": state["step"] + 1}, {"loss": jnp.float32(1.0), "learning_rate": 0.1}

    def batches():
        while True:
            yield {}

    ckpt = Checkpointer(tmp_path / "ckpt", every_steps=100)
    with MetricsLogger(tmp_path) as logger:
        result = train_loop(step_fn=step_fn, state={"step": jnp.int32(0)}, batches=batches(),
                            start_step=0, num_steps=10, checkpointer=ckpt,
                            checkpoint_metadata=lambda: {"data": "position"}, logger=logger,
                            log_every=5, batch_size=2, progress=False, stop=stop,
                            hooks=[PeriodicHook(lambda s, st: evaluated.append(s), every=1)])
    assert (result.step, result.stopped_by, result.steps_run) == (3, "SIGTERM", 3)
    assert ckpt.all_steps() == [3] and ckpt.read_metadata(3) == {"data": "position"}
    assert evaluated == [1, 2]  # neither the step-3 hook nor the end-of-run one
    ckpt.close()


def test_a_loader_that_dies_with_the_signal_still_gets_the_last_step_saved(tmp_path):
    stop = StopSignals(process_count=1)

    def step_fn(state, batch):
        return {"step": state["step"] + 1}, {"loss": jnp.float32(1.0), "learning_rate": 0.1}

    def batches():
        yield {}
        yield {}
        stop.request("SIGTERM")
        raise RuntimeError("Worker process was terminated unexpectedly")

    ckpt = Checkpointer(tmp_path / "ckpt", every_steps=100)
    with MetricsLogger(tmp_path) as logger:
        result = train_loop(step_fn=step_fn, state={"step": jnp.int32(0)}, batches=batches(),
                            start_step=0, num_steps=10, checkpointer=ckpt,
                            checkpoint_metadata=dict, logger=logger, log_every=5,
                            batch_size=2, progress=False, stop=stop)
    assert (result.step, result.stopped_by) == (2, "SIGTERM")
    assert ckpt.all_steps() == [2]
    ckpt.close()


# the signalled command's length: room for the signal after its 3rd logged step (it arrives
# within a step or two of that), short enough that three runs of it stay cheap
STEPS = 24


@pytest.mark.slow
@pytest.mark.xdist_group("e2e")
# SIGINT under -m exhaustive: its handling is the same code, checked in-process above
@pytest.mark.parametrize("signum", [signal.SIGTERM,
                                    pytest.param(signal.SIGINT, marks=pytest.mark.exhaustive)])
def test_jaxdet_train_stops_on_a_signal_and_resumes_exactly(signum, tiny_config, tmp_path):
    """The command, signalled after its 3rd logged step, exits 0 with one line, leaves a
    checkpoint of the step it finished (none was due: checkpoints every 100 steps), and the
    same command then trains on to the losses of a run that was never stopped."""
    from jaxdet.config.loader import dump_config

    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(dump_config(tiny_config))
    train = [sys.executable, "-m", "jaxdet.cli.main", "train", "--config", str(config_file),
             "--no-eval", "--set", "train.log_every=1", "--set", f"train.num_steps={STEPS}",
             "--set", "train.checkpoint_every=100"]
    stopped = tmp_path / "stopped"
    env = users_compile_env()  # the users' XLA:CPU settings: this command is their path
    proc = subprocess.Popen([*train, "--workdir", str(stopped)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    log = stopped / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (log.is_file() and len(log.read_text().splitlines()) >= 3):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no 3 logged steps in 240 s"
        time.sleep(0.05)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    name = signal.Signals(signum).name
    line = out.strip().splitlines()[-1]
    assert line.startswith(f"stopped by {name} after step "), out
    step = int(line.split("after step ")[1].split(",")[0])
    assert 3 <= step < STEPS
    assert sorted(int(p.name) for p in (stopped / "checkpoints").iterdir()
                  if p.name.isdigit()) == [step]
    assert "Traceback" not in err
    done = subprocess.run([*train, "--workdir", str(stopped)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"trained {STEPS - step} steps ({step + 1}-{STEPS})" in done.stdout
    full = subprocess.run([*train, "--workdir", str(tmp_path / "full")], capture_output=True,
                          text=True, timeout=300, env=env)
    assert full.returncode == 0, full.stderr[-3000:]
    rows = {r["step"]: r for r in map(json.loads, log.read_text().splitlines())}
    want = {r["step"]: r for r in map(json.loads, (tmp_path / "full" / "metrics.jsonl")
                                      .read_text().splitlines())}
    assert sorted(rows) == sorted(want) == list(range(1, STEPS + 1))
    for s in rows:  # the same data and the same numbers, step for step
        assert rows[s]["metrics"]["train/loss"] == want[s]["metrics"]["train/loss"], s
