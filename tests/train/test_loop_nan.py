"""A NaN loss stops the loop with the step named, and the last good checkpoint survives."""

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
