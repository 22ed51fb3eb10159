"""A train step and a predict pass over a (data, spatial) mesh of 8 emulated CPU devices give the
same results as on one device, for RetinaNet (ResNet + FPN) and SSD (MobileNet + SSD feature
maps); spatially split convolutions exchange halos (collective-permute), never all-gather
activations.

Images are 256 x 64 so that height splits over 8 spatial shards at the backbone's stride 32.
Both models are shrunk (depth multiplier 0.25, thin heads) to keep compiles short.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.parallel.mesh import MeshLayoutError, check_batch_layout, make_mesh
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

pytestmark = pytest.mark.xdist_group("mesh")

MESHES = [(8, 1), (4, 2), (2, 4), (1, 8)]
BATCH, HEIGHT, WIDTH, MAX_BOXES = 8, 256, 64, 4
COMMON = [
    f"data.resizer.height={HEIGHT}", f"data.resizer.width={WIDTH}",
    f"data.max_number_of_boxes={MAX_BOXES}", f"train.batch_size={BATCH}",
    "train.optimizer.name=momentum",  # plain SGD + momentum: no sign-of-gradient amplification
    "train.learning_rate={name: constant, learning_rate: 0.05}",
    "model.post_processing.score_threshold=0.0",
    "model.post_processing.max_detections_per_class=8",
    "model.post_processing.max_total_detections=8",
    "model.post_processing.pre_nms_top_k=64",
]
MODELS = {
    "retinanet": ("shapes_demo", [
        "model.backbone.depth_multiplier=0.25", "model.neck.depth=16", "model.head.depth=16",
        "model.head.num_layers_before_predictor=1",
        # Some random inits leave a batch-norm channel of these thin maps with a ~0 deviation,
        # which turns float rounding into 1e-5 changes of a step (seed 0 of jaxdet's init, seed
        # 3 of Flax's); seed 1 is well conditioned, so the tolerances below can stay tight.
        "train.seed=1",
    ]),
    "ssd": ("ssd_mobilenet_v1_300", [
        "model.num_classes=3", "model.backbone.depth_multiplier=0.25",
        # Two things make this random-init SSD chaotic, so that float rounding (the order of a
        # sum, on one device or eight) would change its gradients by up to 10%: hard example
        # mining ranks near-equal anchor losses, and batch norm divides channels that ReLU6 left
        # almost constant by their ~0 deviation. Without them the model is well conditioned;
        # RetinaNet above checks batch norm over the mesh.
        "model.hard_example_miner=null",
        "model.backbone.batch_norm.frozen=true",
    ]),
}


def _config(name: str):
    base, overrides = MODELS[name]
    return load_config(base, [*overrides, *COMMON])


def _batch(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    y0 = rng.uniform(0.0, 0.6, (BATCH, MAX_BOXES, 1))
    x0 = rng.uniform(0.0, 0.6, (BATCH, MAX_BOXES, 1))
    size = rng.uniform(0.15, 0.4, (BATCH, MAX_BOXES, 2))
    boxes = np.concatenate([y0, x0, y0 + size[..., :1], x0 + size[..., 1:]], -1)
    return {
        "images": rng.normal(size=(BATCH, HEIGHT, WIDTH, 3)).astype(np.float32),
        "boxes": boxes.astype(np.float32),
        "classes": rng.integers(0, 3, (BATCH, MAX_BOXES)).astype(np.int32),
        "valid": np.arange(MAX_BOXES)[None] < rng.integers(1, MAX_BOXES + 1, (BATCH, 1)),
        "ignore": np.zeros((BATCH, MAX_BOXES), bool),
    }


class _Reference:
    """One model's task, initial state, batch and its single-device step / predict results."""

    def __init__(self, name: str):
        self.config = _config(name)
        self.task = tasks.build_task(self.config)
        self.tx, self.schedule = train_build.build_optimizer(self.config.train)
        self.state0 = jax.device_get(init_train_state(self.task, self.tx, ema=False))
        self.batch = _batch()
        self.image_info = np.tile(np.array([[HEIGHT, WIDTH, HEIGHT, WIDTH]], np.float32),
                                  (BATCH, 1))
        step = make_train_step(self.task, self.tx, self.schedule)
        state, metrics = step(jax.tree.map(np.copy, self.state0), self.batch)
        self.state, self.metrics = jax.device_get((state, metrics))
        self.detections = jax.device_get(jax.jit(self.task.predict)(
            self.state0["params"], self.state0["batch_stats"], self.batch["images"],
            self.image_info))


_REFERENCES: dict[str, _Reference] = {}


@pytest.fixture(params=sorted(MODELS))
def reference(request) -> _Reference:
    if request.param not in _REFERENCES:
        _REFERENCES[request.param] = _Reference(request.param)
    return _REFERENCES[request.param]


def _meshes(default: set) -> list:
    """(model, mesh) pairs, those outside ``default`` under -m exhaustive (a compile each)."""
    return [pytest.param(m, s, id=f"{m}-mesh{s[0]}x{s[1]}",
                         marks=[] if (m, s) in default else [pytest.mark.exhaustive])
            for m in sorted(MODELS) for s in MESHES]


# By default one mesh per sharding: data and spatial together (RetinaNet, the larger head, on
# (2, 4)) and spatial alone at its thinnest (SSD on (1, 8): one backbone row per shard at stride
# 32). Data-only meshes are checked by the batch-norm, optimizer-state and multi-process tests
# and by jaxdet predict's; the other pairs run under -m exhaustive.
DEFAULT_TRAIN = {("retinanet", (2, 4)), ("ssd", (1, 8))}
DEFAULT_PREDICT = {("retinanet", (2, 4)), ("ssd", (1, 8))}


@pytest.mark.parametrize(("reference", "shape"), _meshes(DEFAULT_TRAIN), indirect=["reference"])
def test_train_step_on_mesh_equals_single_device(reference: _Reference, shape) -> None:
    mesh = make_mesh(*shape)
    shardings = state_sharding(mesh, reference.state0)
    batch_shardings = batch_sharding(mesh, reference.task.batch_layout())
    step = make_train_step(reference.task, reference.tx, reference.schedule,
                           state_sharding=shardings, batch_sharding=batch_shardings)
    state, metrics = step(place(reference.state0, shardings),
                          place_batch(reference.batch, batch_shardings))
    # the new state keeps the declared layout: replicated parameters
    leaf = jax.tree.leaves(state["params"])[0]
    assert leaf.sharding.is_fully_replicated and len(leaf.sharding.device_set) == 8
    state, metrics = jax.device_get((state, metrics))
    for key in ("loss", "classification_loss", "localization_loss", "num_positives"):
        np.testing.assert_allclose(metrics[key], reference.metrics[key], rtol=2e-6, err_msg=key)
    assert reference.metrics["num_positives"] > 0
    assert_trees_close(state["params"], reference.state["params"], rtol=1e-5, atol=2e-7,
                        what="params")
    assert_trees_close(state["batch_stats"], reference.state["batch_stats"], rtol=1e-5,
                        atol=1e-6, what="batch_stats")
    assert_trees_close(state["opt_state"], reference.state["opt_state"], rtol=1e-5,
                        atol=1e-6, what="opt_state")


def test_remat_step_on_spatial_mesh_equals_single_device() -> None:
    """Gradient checkpointing of everything (``train.remat``) on a (2, 4) mesh: the
    recomputed, height-split forward gives the plain one-device step."""
    reference = _REFERENCES.setdefault("retinanet", _Reference("retinanet"))
    config = load_config(MODELS["retinanet"][0], [
        *MODELS["retinanet"][1], *COMMON, "train.remat=[backbone, neck, head]"])
    task = tasks.build_task(config)
    mesh = make_mesh(2, 4)
    shardings = state_sharding(mesh, reference.state0)
    step = make_train_step(task, reference.tx, reference.schedule,
                           state_sharding=shardings,
                           batch_sharding=batch_sharding(mesh, task.batch_layout()))
    state, metrics = jax.device_get(step(
        place(reference.state0, shardings),
        place_batch(reference.batch, batch_sharding(mesh, task.batch_layout()))))
    np.testing.assert_allclose(metrics["loss"], reference.metrics["loss"], rtol=2e-6)
    assert_trees_close(state["params"], reference.state["params"], rtol=1e-5, atol=2e-7,
                        what="params")
    assert_trees_close(state["batch_stats"], reference.state["batch_stats"], rtol=1e-5,
                        atol=1e-6, what="batch_stats")


@pytest.mark.parametrize(("reference", "shape"), _meshes(DEFAULT_PREDICT),
                         indirect=["reference"])
def test_predict_on_mesh_equals_single_device(reference: _Reference, shape) -> None:
    mesh = make_mesh(*shape)
    predict = mesh_predict(reference.task.predict, mesh)
    detections = jax.device_get(predict(
        reference.state0["params"], reference.state0["batch_stats"], reference.batch["images"],
        reference.image_info))
    expected = reference.detections
    np.testing.assert_array_equal(detections["num_detections"], expected["num_detections"])
    assert expected["num_detections"].sum() > 0
    np.testing.assert_array_equal(detections["classes"], expected["classes"])
    np.testing.assert_allclose(detections["scores"], expected["scores"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(detections["boxes"], expected["boxes"], rtol=1e-4, atol=1e-3)


def _collectives(hlo: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"collective-permute": [], "all-gather": []}
    for line in hlo.splitlines():
        for op in found:
            if re.search(rf"\b{op}(-start)?\(", line):
                found[op].append(line.strip())
    return found


def test_spatial_convolutions_exchange_halos_not_activations() -> None:
    """The compiled forward of backbone + FPN + heads over a (2, 4) mesh: convolutions on
    height-split activations use collective-permute for their halo rows, and no activation is
    all-gathered. (Traced outside ``thin_maps.mesh_scope``, as a model called directly is, so
    even the thinnest maps stay split; train and predict steps gather those, see
    ``test_thin_maps.py``.)"""
    config = _config("retinanet")
    task = tasks.build_task(config)
    params, stats = task.initial_variables()
    graphdef = nnx.graphdef(task.model)
    mesh = make_mesh(2, 4)
    images = place_batch(_batch(), batch_sharding(mesh, task.batch_layout()))["images"]
    assert images.sharding.shard_shape(images.shape) == (BATCH // 2, HEIGHT // 4, WIDTH, 3)

    def forward(params, stats, images):
        return nnx.merge(graphdef, params, stats)(images)

    hlo = jax.jit(forward).lower(params, stats, images).compile().as_text()
    found = _collectives(hlo)
    assert found["collective-permute"], "no halo exchange: were the convolutions partitioned?"
    assert not found["all-gather"], "\n".join(found["all-gather"][:5])


def test_layout_errors_name_the_field() -> None:
    mesh = make_mesh(4, 2)
    with pytest.raises(MeshLayoutError, match=r"train.batch_size=6 .* parallel.data=4"):
        check_batch_layout(mesh, batch_size=6, image_size=(256, 64), max_stride=32)
    with pytest.raises(MeshLayoutError, match=r"height 96 .* stride 32 x parallel.spatial=2 = 64"):
        check_batch_layout(mesh, batch_size=8, image_size=(96, 64), max_stride=32)
    check_batch_layout(mesh, batch_size=8, image_size=(128, 64), max_stride=32)
    with pytest.raises(MeshLayoutError, match="parallel.spatial=3 does not divide the 8"):
        make_mesh(-1, 3)
    with pytest.raises(MeshLayoutError, match="16 devices, but only 8"):
        make_mesh(4, 4)
    assert dict(make_mesh(-1, 2).shape) == {"data": 4, "spatial": 2}
