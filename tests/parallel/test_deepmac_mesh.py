"""DeepMAC (CenterNet with a mask head) over a (data, spatial) mesh of 8 emulated CPU devices:
the train step (the pixel embeddings, split along their height, cropped at every box; the mask
network on the crops) and predict (each detection's mask) give the one-device results.

Images are 256 x 64, so that height splits over 4 spatial shards at the backbone's stride 32;
the model is the DeepMAC demo shrunk further, BatchNorm frozen (as the Faster R-CNN mesh test:
random-init BatchNorm of thin maps makes float rounding visible)."""

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

BATCH, HEIGHT, WIDTH, MAX_BOXES = 8, 256, 64, 4
OVERRIDES = [
    f"data.resizer.height={HEIGHT}", f"data.resizer.width={WIDTH}",
    f"data.max_number_of_boxes={MAX_BOXES}", f"train.batch_size={BATCH}",
    "train.optimizer.name=momentum",
    "train.learning_rate={name: constant, learning_rate: 0.01}",
    "model.backbone.batch_norm.frozen=true", "model.mask_head.batch_norm.frozen=true",
    "model.neck.depth=16", "model.head_depth=16", "model.mask_head.head_depth=16",
    "model.mask_head.num_init_channels=8", "model.mask_head.mask_size=8",
    "model.post_processing.max_detections=8",
]
LOSSES = ("loss", "heatmap_loss", "size_loss", "offset_loss", "mask_loss", "num_masks")


def _batch(task, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    tl = rng.uniform(0.0, 0.6, (BATCH, MAX_BOXES, 2))
    boxes = np.concatenate([tl, tl + rng.uniform(0.2, 0.4, (BATCH, MAX_BOXES, 2))], -1)
    hm, wm = task.mask_shape
    masks = np.zeros((BATCH, MAX_BOXES, hm, wm), np.uint8)
    for i in range(BATCH):
        for j in range(MAX_BOXES):
            y0, x0, y1, x1 = (boxes[i, j] * [hm, wm, hm, wm]).astype(int)
            masks[i, j, y0:(y0 + y1) // 2, x0:x1] = 1
    return {
        "images": rng.normal(size=(BATCH, HEIGHT, WIDTH, 3)).astype(np.float32),
        "boxes": boxes.astype(np.float32),
        "classes": rng.integers(0, 3, (BATCH, MAX_BOXES)).astype(np.int32),
        "valid": np.arange(MAX_BOXES)[None] < rng.integers(1, MAX_BOXES + 1, (BATCH, 1)),
        "ignore": np.zeros((BATCH, MAX_BOXES), bool), "masks": masks,
        "image_info": np.tile(np.float32([HEIGHT, WIDTH, HEIGHT, WIDTH]), (BATCH, 1)),
    }


@pytest.fixture(scope="module")
def reference():
    config = load_config("centernet_deepmac_shapes_demo", OVERRIDES)
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    state0 = jax.device_get(init_train_state(task, tx, ema=False))
    batch = _batch(task)
    step = make_train_step(task, tx, schedule)
    state, metrics = jax.device_get(step(jax.tree.map(np.copy, state0), batch))
    info = np.tile(np.array([[HEIGHT, WIDTH, HEIGHT, WIDTH]], np.float32), (BATCH, 1))
    detections = jax.device_get(jax.jit(task.predict)(
        state0["params"], state0["batch_stats"], batch["images"], info))
    return {"task": task, "tx": tx, "schedule": schedule, "state0": state0, "batch": batch,
            "state": state, "metrics": metrics, "info": info, "detections": detections}


# under -m exhaustive (41 s cold): make test keeps DeepMAC's predict on the mesh (below) and
# the Faster R-CNN and RetinaNet train steps on data x spatial meshes
@pytest.mark.exhaustive
def test_train_step_on_mesh_equals_single_device(reference) -> None:
    mesh = make_mesh(2, 4)
    shardings = state_sharding(mesh, reference["state0"])
    batch_shardings = batch_sharding(mesh, reference["task"].batch_layout())
    step = make_train_step(reference["task"], reference["tx"], reference["schedule"],
                           state_sharding=shardings, batch_sharding=batch_shardings)
    state, metrics = jax.device_get(step(place(reference["state0"], shardings),
                                         place_batch(reference["batch"], batch_shardings)))
    for key in LOSSES:
        np.testing.assert_allclose(metrics[key], reference["metrics"][key], rtol=1e-5,
                                   atol=1e-6, err_msg=key)
    assert reference["metrics"]["num_masks"] > 0
    # One step moves the params by 0.01 x gradient; float rounding of the gradient (a sum on
    # one device or eight) moves that by up to 4e-6 (measured over seeds 0-2), at any scale of
    # the param, so the tolerance is absolute.
    assert_trees_close(state["params"], reference["state"]["params"], rtol=1e-4, atol=1e-5,
                       what="params")


def test_predict_on_mesh_equals_single_device(reference) -> None:
    predict = mesh_predict(reference["task"].predict, make_mesh(2, 4))
    state0 = reference["state0"]
    detections = jax.device_get(predict(state0["params"], state0["batch_stats"],
                                        reference["batch"]["images"], reference["info"]))
    expected = reference["detections"]
    np.testing.assert_array_equal(detections["classes"], expected["classes"])
    np.testing.assert_allclose(detections["scores"], expected["scores"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(detections["boxes"], expected["boxes"], rtol=1e-4, atol=1e-3)
    # probabilities after the mask network's 20-odd convolutions: float rounding of ~1e-5
    np.testing.assert_allclose(detections["masks"], expected["masks"], rtol=1e-3, atol=1e-4)
