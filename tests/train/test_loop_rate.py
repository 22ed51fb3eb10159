"""The loop's throughput leaves out the compiling first step, evaluation hooks and checkpoint
writes; a finished run called again trains nothing. Time is a fake clock: no timing test."""

import jax.numpy as jnp

from jaxdet.train import loop as loop_module
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.loop import PeriodicHook, train_loop
from jaxdet.train.metrics_log import MetricsLogger


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(tmp_path, clock, *, start_step=0, num_steps=8, hook_seconds=100.0):
    def step_fn(state, batch):
        clock.now += 30.0 if int(state["step"]) == start_step else 2.0  # compile, then 2 s
        return {"step": state["step"] + 1}, {"loss": jnp.float32(1.0), "learning_rate": 0.1}

    def batches():
        while True:
            yield {}

    def slow_eval(step, state):
        clock.now += hook_seconds

    ckpt = Checkpointer(tmp_path / "ckpt", keep=2, every_steps=4)
    with MetricsLogger(tmp_path) as logger:
        result = train_loop(step_fn=step_fn, state={"step": jnp.int32(start_step)},
                            batches=batches(), start_step=start_step, num_steps=num_steps,
                            checkpointer=ckpt, checkpoint_metadata=dict, logger=logger,
                            log_every=2, batch_size=4, progress=False,
                            hooks=[PeriodicHook(slow_eval, every=3)])
    ckpt.close()
    return result


def test_rate_leaves_out_compile_and_evaluation(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(loop_module.time, "perf_counter", clock)
    result = _run(tmp_path, clock)
    # 7 steps after the compiling one, 2 s each, 4 images each; the 100-s evaluations at
    # steps 3 and 6 (and at the end) are not training time
    assert result.images_per_second == 4 * 7 / (2 * 7)
    assert result.compile_seconds == 30.0
    assert result.steps_run == 8


def test_eta_text():
    assert loop_module._eta(59.6) == "01:00"
    assert loop_module._eta(3725) == "1:02:05"


def test_a_complete_run_trains_nothing(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(loop_module.time, "perf_counter", clock)
    result = _run(tmp_path, clock, start_step=8, num_steps=8, hook_seconds=0.0)
    assert (result.steps_run, result.step, result.images_per_second) == (0, 8, 0.0)
