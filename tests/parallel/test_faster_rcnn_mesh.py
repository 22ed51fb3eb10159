"""Faster R-CNN (C4 and FPN) over a (data, spatial) mesh of 8 emulated CPU devices: the train
step (first-stage sampling, proposals by NMS, second-stage sampling, crops from height-split
feature maps) and predict give the one-device results.

Images are 256 x 64, so that height splits over 8 spatial shards at the FPN's stride 32. The
models are the shapes demos shrunk further; BatchNorm is frozen (random-init BatchNorm of thin
maps divides by near-zero deviations, which makes float rounding visible), so the step's
only randomness is the samplers' draw from the step key, the same on any mesh.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.parallel.mesh import make_mesh
from jaxdet.parallel.sharding import (
    batch_sharding,
    mesh_predict,
    place,
    place_batch,
    state_sharding,
)
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state, make_train_step

from .conftest import assert_trees_close

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mesh")]

MESHES = [(2, 4)]  # data x spatial; tests/parallel/test_mesh_equivalence.py covers the rest
BATCH, HEIGHT, WIDTH, MAX_BOXES = 8, 256, 64, 4
COMMON = [
    f"data.resizer.height={HEIGHT}", f"data.resizer.width={WIDTH}",
    f"data.max_number_of_boxes={MAX_BOXES}", f"train.batch_size={BATCH}",
    "train.optimizer.name=momentum",
    "train.learning_rate={name: constant, learning_rate: 0.01}",
    "model.backbone.batch_norm.frozen=true", "model.first_stage_box_predictor_depth=16",
    "model.first_stage_max_proposals=64", "model.second_stage_batch_size=16",
    "model.initial_crop_size=6", "model.second_stage_post_processing.score_threshold=0.0",
    "model.second_stage_post_processing.max_detections_per_class=8",
    "model.second_stage_post_processing.max_total_detections=8",
]
MODELS = {
    "c4": ("faster_rcnn_shapes_demo", []),
    # seed 1: whether a random-init RPN's 64 proposals overlap a box enough for the second
    # stage to sample a positive (asserted below) depends on the draw; seeds 0 and 2 do not.
    "fpn": ("faster_rcnn_fpn_shapes_demo", ["model.neck.depth=16",
                                            "model.box_classifier_fc_depth=32",
                                            "train.seed=1"]),
}
LOSSES = ("loss", "first_stage_objectness_loss", "first_stage_localization_loss",
          "second_stage_classification_loss", "second_stage_localization_loss",
          "num_positives", "num_proposals", "num_sampled_positives")


def _batch(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    tl = rng.uniform(0.0, 0.6, (BATCH, MAX_BOXES, 2))
    size = rng.uniform(0.3, 0.4, (BATCH, MAX_BOXES, 2))
    return {
        "images": rng.normal(size=(BATCH, HEIGHT, WIDTH, 3)).astype(np.float32),
        "boxes": np.concatenate([tl, tl + size], -1).astype(np.float32),
        "classes": rng.integers(0, 3, (BATCH, MAX_BOXES)).astype(np.int32),
        "valid": np.arange(MAX_BOXES)[None] < rng.integers(1, MAX_BOXES + 1, (BATCH, 1)),
        "ignore": np.zeros((BATCH, MAX_BOXES), bool),
        "image_info": np.tile(np.array([[HEIGHT, WIDTH, HEIGHT, WIDTH]], np.float32),
                              (BATCH, 1)),
    }


class _Reference:
    """One variant's task, initial state, batch and its one-device step / predict results."""

    def __init__(self, name: str):
        base, overrides = MODELS[name]
        self.task = tasks.build_task(load_config(base, [*overrides, *COMMON]))
        self.tx, self.schedule = train_build.build_optimizer(
            load_config(base, [*overrides, *COMMON]).train)
        self.state0 = jax.device_get(init_train_state(self.task, self.tx, ema=False))
        self.batch = _batch()
        step = make_train_step(self.task, self.tx, self.schedule)
        self.state, self.metrics = jax.device_get(
            step(jax.tree.map(np.copy, self.state0), self.batch))
        self.detections = jax.device_get(jax.jit(self.task.predict)(
            self.state0["params"], self.state0["batch_stats"], self.batch["images"],
            self.batch["image_info"]))


_REFERENCES: dict[str, _Reference] = {}


# the C4 model on the mesh under -m exhaustive: FPN's multi-level RoI pooling is the superset
@pytest.fixture(params=[pytest.param(m, marks=pytest.mark.exhaustive) if m == "c4" else m
                        for m in sorted(MODELS)])
def reference(request) -> _Reference:
    if request.param not in _REFERENCES:
        _REFERENCES[request.param] = _Reference(request.param)
    return _REFERENCES[request.param]


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: f"mesh{s[0]}x{s[1]}")
def test_train_step_on_mesh_equals_single_device(reference: _Reference, shape) -> None:
    mesh = make_mesh(*shape)
    shardings = state_sharding(mesh, reference.state0)
    batch_shardings = batch_sharding(mesh, reference.task.batch_layout())
    step = make_train_step(reference.task, reference.tx, reference.schedule,
                           state_sharding=shardings, batch_sharding=batch_shardings)
    state, metrics = jax.device_get(step(place(reference.state0, shardings),
                                         place_batch(reference.batch, batch_shardings)))
    for key in LOSSES:
        np.testing.assert_allclose(metrics[key], reference.metrics[key], rtol=1e-5,
                                   atol=1e-6, err_msg=key)
    assert reference.metrics["num_sampled_positives"] > 0
    assert_trees_close(state["params"], reference.state["params"], rtol=1e-4, atol=1e-6,
                       what="params")


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: f"mesh{s[0]}x{s[1]}")
def test_predict_on_mesh_equals_single_device(reference: _Reference, shape) -> None:
    predict = mesh_predict(reference.task.predict, make_mesh(*shape))
    detections = jax.device_get(predict(
        reference.state0["params"], reference.state0["batch_stats"], reference.batch["images"],
        reference.batch["image_info"]))
    expected = reference.detections
    assert expected["num_detections"].sum() > 0
    np.testing.assert_array_equal(detections["num_detections"], expected["num_detections"])
    np.testing.assert_array_equal(detections["classes"], expected["classes"])
    np.testing.assert_allclose(detections["scores"], expected["scores"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(detections["boxes"], expected["boxes"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(detections["proposals"], expected["proposals"], rtol=1e-4,
                               atol=1e-5)
