"""The loop guards a run: a NaN loss stops it with the step named and the last good checkpoint
kept; fp16 steps skipped for overflow are counted in the logs."""

import json

import jax.numpy as jnp
import pytest

from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.loop import TrainingDiverged, train_loop
from jaxdet.train.metrics_log import MetricsLogger


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    def step_fn(state, batch):
        step = state["step"] + 1
        loss = jnp.where(step >= 5, jnp.nan, 1.0 / step)
        return {"step": step, "w": state["w"] + 1.0}, {"loss": loss, "learning_rate": 0.1}

    def batches():
        while True:
            yield {}

    ckpt = Checkpointer(tmp_path / "ckpt", keep=3, every_steps=2)
    logger = MetricsLogger(tmp_path)
    with pytest.raises(TrainingDiverged, match=r"loss is nan at step 5.*step 4\) is kept"):
        train_loop(step_fn=step_fn, state={"step": jnp.int32(0), "w": jnp.zeros(())},
                   batches=batches(), start_step=0, num_steps=10, checkpointer=ckpt,
                   checkpoint_metadata=dict, logger=logger, log_every=1, batch_size=1,
                   progress=False)
    ckpt.wait()
    assert ckpt.all_steps() == [2, 4]
    state, _ = ckpt.restore(None, {"step": jnp.int32(0), "w": jnp.zeros(())})
    assert int(state["step"]) == 4 and float(state["w"]) == 4.0
    logger.close()
    ckpt.close()


def test_skipped_fp16_steps_are_counted_in_the_logs(tmp_path):
    """Steps 2, 3 and 5 report ``skipped`` (fp16 overflow); the log at each step carries the
    running count, whatever ``log_every`` leaves out."""
    skipped_at = {2, 3, 5}

    def step_fn(state, batch):
        step = state["step"] + 1
        skipped = jnp.int32(int(step) in skipped_at)
        return {"step": step}, {"loss": jnp.float32(1.0), "learning_rate": 0.1,
                                "skipped": skipped}

    def batches():
        while True:
            yield {}

    ckpt = Checkpointer(tmp_path / "ckpt", keep=1, every_steps=100)
    with MetricsLogger(tmp_path) as logger:
        train_loop(step_fn=step_fn, state={"step": jnp.int32(0)}, batches=batches(),
                   start_step=0, num_steps=6, checkpointer=ckpt, checkpoint_metadata=dict,
                   logger=logger, log_every=2, batch_size=1, progress=False)
    ckpt.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    counts = {r["step"]: r["metrics"]["train/skipped_steps"] for r in records}
    assert counts == {2: 1.0, 4: 2.0, 6: 3.0}
