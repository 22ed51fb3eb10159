"""A whole run (``runs.train``: data, steps, checkpoints, eval) on a (data=4, spatial=2) mesh of
emulated CPU devices ends where the one-device run ends; layout errors stop it before anything
compiles; the optimizer state can be split over ``data``."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.jobs import runs
from jaxdet.parallel import build as parallel_build
from jaxdet.parallel.mesh import MeshLayoutError, make_mesh
from jaxdet.parallel.sharding import batch_sharding, place, place_batch, state_sharding
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state, make_train_step

pytestmark = pytest.mark.xdist_group("mesh")

# momentum SGD: Adam's first update is lr * sign(grad), which turns rounding noise in near-zero
# gradients into whole-learning-rate differences
SGD = ["train.optimizer.name=momentum",
       "train.learning_rate={name: constant, learning_rate: 0.02}",
       "train.num_steps=3", "train.checkpoint_every=3"]


def _config(tiny_overrides, *extra):
    return load_config("shapes_demo", [*tiny_overrides, *SGD, *extra])


def _params(workdir, config):
    _, state, step = runs.restore_for_inference(config, workdir)
    assert step == 3
    return jax.device_get(state["params"])


def test_run_on_data_and_spatial_mesh_equals_one_device(tiny_overrides, tmp_path):
    # 128 px high: two rows of the stride-32 map per spatial shard
    single = _config(tiny_overrides, "data.resizer.height=128")
    runs.train(single, tmp_path / "single", progress=False, evaluate=False)

    meshed = _config(tiny_overrides, "parallel.data=4", "parallel.spatial=2", "eval.max_images=4",
                     "data.resizer.height=128")
    result = runs.train(meshed, tmp_path / "mesh", progress=False, evaluate=True)
    assert result.step == 3
    leaf = jax.tree.leaves(result.state["params"])[0]
    assert len(leaf.sharding.device_set) == 8

    expected, actual = _params(tmp_path / "single", single), _params(tmp_path / "mesh", meshed)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-6)
    # eval ran over the mesh and wrote its metrics
    metrics = json.loads((tmp_path / "mesh" / "eval" / "step_3" / "metrics.json").read_text())
    assert "AP" in metrics
    # `jaxdet eval` of that checkpoint over the mesh and on one device: the same metrics
    on_mesh = runs.evaluate(meshed, tmp_path / "mesh", out_dir=tmp_path / "eval_mesh",
                            progress=False)
    one_device = load_config("shapes_demo", [*tiny_overrides, *SGD, "eval.max_images=4",
                                             "data.resizer.height=128"])
    alone = runs.evaluate(one_device, tmp_path / "mesh", out_dir=tmp_path / "eval_one",
                          progress=False)
    for key in ("AP", "AP50", "AR100"):
        assert on_mesh[key] == pytest.approx(metrics[key], abs=1e-6), key
        assert on_mesh[key] == pytest.approx(alone[key], abs=1e-6), key
    meshed_dets, alone_dets = (json.loads((tmp_path / d / "detections.json").read_text())
                               for d in ("eval_mesh", "eval_one"))
    assert len(meshed_dets) == len(alone_dets) > 0
    for a, e in zip(meshed_dets, alone_dets, strict=True):
        assert (a["image_id"], a["category_id"]) == (e["image_id"], e["category_id"])
        assert a["score"] == pytest.approx(e["score"], rel=1e-4, abs=1e-5)
        np.testing.assert_allclose(a["bbox"], e["bbox"], rtol=1e-4, atol=1e-2)


def test_bad_layout_is_one_clear_error_before_compiling(tiny_overrides, tmp_path):
    config = _config(tiny_overrides, "parallel.data=8")  # tiny batch is 4
    with pytest.raises(MeshLayoutError, match=r"train.batch_size=4 does not divide over "
                                              r"parallel.data=8"):
        runs.train(config, tmp_path / "bad", progress=False, evaluate=False)
    config = _config(tiny_overrides, "parallel.data=2", "parallel.spatial=4")  # 64 px high
    with pytest.raises(MeshLayoutError, match=r"height 64 does not divide by largest feature "
                                              r"stride 32 x parallel.spatial=4 = 128"):
        runs.train(config, tmp_path / "bad2", progress=False, evaluate=False)
    assert not (tmp_path / "bad" / "checkpoints").exists() or not any(
        (tmp_path / "bad" / "checkpoints").iterdir())


def test_optimizer_state_split_over_data_gives_the_same_step(tiny_overrides):
    config = load_config("shapes_demo", [*tiny_overrides, *SGD[:2], "train.batch_size=8"])
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    state0 = jax.device_get(init_train_state(task, tx, ema=False))
    rng = np.random.default_rng(0)
    batch = {
        "images": rng.normal(size=(8, 64, 64, 3)).astype(np.float32),
        "boxes": np.tile(np.array([[0.1, 0.2, 0.5, 0.6]], np.float32), (8, 8, 1)),
        "classes": np.ones((8, 8), np.int32),
        "valid": np.arange(8)[None].repeat(8, 0) < 2,
        "ignore": np.zeros((8, 8), bool),
    }
    mesh = make_mesh(8, 1)
    results = {}
    for split in (False, True):
        shardings = state_sharding(mesh, state0, shard_optimizer_state=split)
        step = make_train_step(task, tx, schedule, state_sharding=shardings,
                               batch_sharding=batch_sharding(mesh, task.batch_layout()))
        state, _ = step(place(state0, shardings),
                        place_batch(batch, batch_sharding(mesh, task.batch_layout())))
        results[split] = state
    # every momentum buffer with a dimension that divides by 8 is split in eighths over the devices
    moments = [x for x in jax.tree.leaves(results[True]["opt_state"])
               if any(d % 8 == 0 for d in x.shape)]
    assert moments
    for x in moments:
        shard = x.sharding.shard_shape(x.shape)
        assert np.prod(shard) * 8 == np.prod(x.shape), (x.shape, shard)
    # the same numbers, up to the order of the gradient sums (reduce-scatter vs all-reduce):
    # 5e-5 relative on one value of 2.7e-4 in 2,352 on an AMD EPYC without AVX512-BF16
    for a, e in zip(jax.tree.leaves(jax.device_get(results[True])),
                    jax.tree.leaves(jax.device_get(results[False])), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-7)


def test_mesh_uses_all_devices_by_default(tiny_overrides):
    config = load_config("shapes_demo", [o for o in tiny_overrides if o != "parallel.data=1"])
    assert dict(parallel_build.build_mesh(config).shape) == {"data": 8, "spatial": 1}
    config = load_config("shapes_demo", [*tiny_overrides[:-1], "parallel.spatial=2"])
    assert dict(parallel_build.build_mesh(config).shape) == {"data": 4, "spatial": 2}
