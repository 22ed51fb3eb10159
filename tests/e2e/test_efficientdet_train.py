"""EfficientDet-D0 end to end on generated data: drop-connect is live in training, deterministic
per (seed, step), so a killed run resumes to exactly the parameters of an uninterrupted one;
eval runs with the moving average."""

import json
import shutil

import jax
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.jobs import runs

pytestmark = pytest.mark.xdist_group("efficientdet_d0")

TINY = [
    "data.resizer.min_dimension=64", "data.resizer.max_dimension=64",
    "data.augment=[{name: random_horizontal_flip}, {name: random_scale_crop_and_pad_to_square, "
    "output_size: 64, scale_min: 0.5, scale_max: 1.5}]",
    "data.train.num_images=12", "data.train.image_size=[64, 64]", "data.train.output_dir=train",
    "data.eval.num_images=4", "data.eval.image_size=[64, 64]", "data.eval.output_dir=eval",
    "data.max_number_of_boxes=8", "train.batch_size=2", "train.num_steps=4",
    "train.checkpoint_every=2", "train.log_every=1", "train.learning_rate.warmup_steps=1",
    "train.learning_rate.total_steps=4", "eval.batch_size=4", "eval.num_visualizations=0",
    "parallel.data=1",
]


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def test_drop_connect_is_live_and_keyed_by_step():
    config = load_config("efficientdet_d0_shapes", TINY)
    task = tasks.build_task(config)
    params, stats = task.initial_variables()
    images = np.random.default_rng(0).normal(size=(2, 64, 64, 3)).astype(np.float32)
    # box encodings: the freshly initialized class logits sit at the prior's bias everywhere
    run = jax.jit(lambda rng: task.apply(params, stats, images, train=True, rng=rng)[0][1])
    same = run(task.step_key(5)), run(task.step_key(5))
    other = run(task.step_key(6))
    np.testing.assert_array_equal(same[0], same[1])
    assert not np.array_equal(same[0], other)  # different masks on another step
    no_drop = jax.jit(lambda: task.apply(params, stats, images, train=True)[0][1])()
    assert not np.array_equal(same[0], no_drop)
    scale = float(np.abs(np.asarray(no_drop)).max())
    assert float(np.abs(np.asarray(same[0]) - np.asarray(no_drop)).max()) > 0.01 * scale


@pytest.mark.exhaustive  # 110 s: kill-and-resume is checked on the tiny SSD by default, and
# drop-connect's per-step keys (what makes EfficientDet's resume exact) by the test above
def test_killed_run_resumes_exactly_and_evaluates_with_ema(tmp_path):
    """A run killed after its step-2 checkpoint (the uninterrupted run's workdir without its
    step-4 checkpoint: two runs instead of three) resumes to the uninterrupted parameters."""
    config = load_config("efficientdet_d0_shapes", TINY)
    assert config.train.ema_decay == 0.9998 and config.eval.use_ema
    full = runs.train(config, tmp_path / "full", progress=False, evaluate=False)
    assert sorted(p.name for p in (tmp_path / "full" / "checkpoints").iterdir()
                  if p.name.isdigit()) == ["2", "4"]
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "4")
    resumed = runs.train(config, tmp_path / "resumed", progress=False)
    assert resumed.step == full.step == 4
    for a, b in zip(_leaves(full.state["params"]), _leaves(resumed.state["params"]),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    metrics = (tmp_path / "resumed" / "eval" / "step_4" / "metrics.json")
    assert metrics.is_file() and '"AP"' in metrics.read_text()
    steps = [json.loads(x)["step"] for x in
             (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
             if "train/loss" in x]
    assert steps == [1, 2, 3, 4]  # steps 3 and 4 recomputed, each logged once
