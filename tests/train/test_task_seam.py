"""The task seam: the SSD family's task gives the batch layout that the train step, the sharding
rules and the abstract batch all follow; ``model.type`` picks the task in one place; restoring a
checkpoint for eval / predict builds no optimizer."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.jobs import runs
from jaxdet.parallel.mesh import make_mesh
from jaxdet.parallel.sharding import batch_sharding
from jaxdet.tasks.ssd import SSDTask
from jaxdet.train import build as train_build
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.step import abstract_train_batch, abstract_train_state
from untrained_workdir import untrained_workdir


def test_model_type_picks_the_task_and_its_layout_drives_step_and_sharding(tiny_overrides):
    config = load_config("shapes_demo", [*tiny_overrides, "data.max_number_of_boxes=7"])
    task = tasks.build_task(config)
    assert isinstance(task, SSDTask) and tasks.family(config).build is not None
    assert task.max_stride() == 32
    batch = abstract_train_batch(task, 4)
    assert {k: (v.shape, np.dtype(v.dtype)) for k, v in batch.items()} == {
        "images": ((4, 64, 64, 3), np.float32), "boxes": ((4, 7, 4), np.float32),
        "classes": ((4, 7), np.int32), "valid": ((4, 7), np.bool_),
        "ignore": ((4, 7), np.bool_)}
    specs = {k: s.spec for k, s in batch_sharding(make_mesh(2, 4), task.batch_layout()).items()}
    assert specs == {"images": P("data", "spatial", None, None), "boxes": P("data", None, None),
                     "classes": P("data", None), "valid": P("data", None),
                     "ignore": P("data", None)}


@pytest.mark.slow
def test_restoring_for_inference_builds_no_optimizer(tiny_overrides, tmp_path, monkeypatch):
    config = load_config("shapes_demo", [*tiny_overrides, "train.num_steps=1"])
    untrained_workdir(config, tmp_path)  # a step-0 checkpoint of the whole train state
    # the whole train state, restored as training does (optimizer included)
    tx, _ = train_build.build_optimizer(config.train)
    full = abstract_train_state(tasks.build_task(config), tx,
                                ema=config.train.ema_decay is not None)
    with Checkpointer(tmp_path / "checkpoints") as checkpointer:
        saved, _ = checkpointer.restore(0, full)

    def no_optimizer(*args, **kwargs):
        raise AssertionError("eval / predict built an optimizer")

    monkeypatch.setattr(train_build, "build_optimizer", no_optimizer)
    task, state, step = runs.restore_for_inference(config, tmp_path)
    assert step == 0 and "opt_state" not in state
    assert set(state) == {"params", "batch_stats"}  # shapes_demo keeps no moving average
    for key in state:
        for a, b in zip(jax.tree.leaves(state[key]), jax.tree.leaves(saved[key]), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    params, _ = runs.inference_variables(config, state)
    assert jax.tree.structure(params) == jax.tree.structure(task.abstract_variables()[0])
    with pytest.raises(AssertionError, match="built an optimizer"):
        runs.train(load_config("shapes_demo", [*tiny_overrides, "train.num_steps=2"]), tmp_path,
                   progress=False, evaluate=False)
