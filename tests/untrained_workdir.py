"""A workdir at step 0 with a model's initial weights, for tests that need a checkpoint but
not a trained model: no train step is compiled."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from jaxdet import tasks
from jaxdet.config.loader import dump_config
from jaxdet.config.schema import Config
from jaxdet.jobs import runs
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state


def untrained_workdir(config: Config, workdir: Path, *, offset: float = 0.01) -> Path:
    """Make ``workdir`` a run at step 0, as ``jaxdet convert-checkpoint`` leaves one: its
    ``config.yaml`` and an orbax checkpoint of the whole initial train state (fresh optimizer
    state) whose floating-point parameters are moved by ``offset``, so that weights read back
    from it differ from a fresh build's. Returns ``workdir``."""
    workdir = Path(workdir)
    checkpointer = runs.open_checkpoints(config, workdir)
    try:
        task = tasks.build_task(config)
        tx, _ = train_build.build_optimizer(config.train)
        state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                                 loss_scale=train_build.build_loss_scale(config))
        state["params"] = jax.tree.map(
            lambda p: p + offset if jnp.issubdtype(p.dtype, jnp.floating) else p,
            state["params"])
        checkpointer.save(0, state, {"fingerprint": runs.config_fingerprint(config)},
                          force=True)
        checkpointer.wait()
    finally:
        checkpointer.close()
    (workdir / "config.yaml").write_text(dump_config(config))
    return workdir
