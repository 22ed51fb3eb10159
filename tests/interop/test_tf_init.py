"""A model built from a zoo pipeline.config as shipped starts where TF's does: every parameter
drawn from the distribution the TF OD API draws that variable from (its config's initializers,
Keras's defaults where TF uses them, EfficientNet's own), against TF-written statistics
(fixtures/make_tf_init_stats.py): the standard deviation within sampling noise, the mean near
TF's, no value beyond TF's range (a truncated normal stays truncated)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.train.optim import param_path

FIXTURES = Path(__file__).parent / "fixtures"
CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"
STATS = json.loads((FIXTURES / "tf_init_stats.json").read_text())["stats"]
PLACEHOLDERS = ["data.train.input_path=unused", "data.eval.input_path=unused"]


@pytest.mark.skipif(not CONFIGS.is_dir(), reason="../shared absent")
@pytest.mark.parametrize("name", sorted(STATS))
def test_fresh_model_draws_as_tf_draws(name):
    import jax

    config = load_pipeline_config(CONFIGS / f"{name}.config", PLACEHOLDERS)
    task = tasks.build_task(config)
    params, _ = task.initial_variables()
    ours = {param_path(k): np.asarray(v, np.float64)
            for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    tf_stats = STATS[name]
    mapping = tasks.tf_name_map(task.model, config)
    # only the classifier's own top (EfficientNet's last 1x1 conv and dense layer) is unused
    unused = [k for k in tf_stats if k not in mapping]
    assert len(unused) <= 5 and all("classification_backbone" in k for k in unused), unused
    compared, off = 0, []
    for tf_path, (path, _transform) in mapping.items():
        if tf_path not in tf_stats:
            continue  # batch-norm statistics
        size, mean, std, largest = tf_stats[tf_path]
        value = ours["/".join(map(str, path))]
        compared += 1
        if std == 0:  # constants (biases, norm offsets and scales): the same constant
            if not np.allclose(value, mean, atol=1e-6):
                off.append((tf_path, "constant", float(value.mean()), mean))
            continue
        noise = 5 / np.sqrt(2 * min(size, value.size))  # standard errors of a deviation
        if abs(value.std() / std - 1) > max(noise, 0.02):
            off.append((tf_path, "std", float(value.std()), std))
        if abs(value.mean() - mean) > 5 * std / np.sqrt(value.size) + 1e-7:
            off.append((tf_path, "mean", float(value.mean()), mean))
        if np.abs(value).max() > 1.25 * largest + abs(mean):
            off.append((tf_path, "max", float(np.abs(value).max()), largest))
    assert compared == len(tf_stats) - len(unused)
    assert off == []
