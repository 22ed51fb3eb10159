"""DeepMAC on the CenterNet task: the batch gains ``masks``, the generic train step compiles
once for no, some and all boxes, the mask loss is TF's (per box the mean pixel sigmoid
cross-entropy against the box's cropped mask, over the boxes of the allowed classes, divided
by their count) times ``task_loss_weight`` in the total, predict returns each detection's mask,
and the config refuses what cannot work."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.config.schema_deepmac import MASK_NETWORK_STAGES
from jaxdet.core.losses import weighted_sigmoid_loss
from jaxdet.models.backbones.hourglass import mask_network_spec
from jaxdet.models.inspect import abstract_call
from jaxdet.models.layers import BatchNormParams
from jaxdet.tasks.center_net import deepmac_ops as dm
from jaxdet.tasks.center_net.deepmac import MaskNetwork
from jaxdet.train.step import init_train_state, make_train_step

from ..conftest import masked_box_batch

MAX_BOXES = 4
OVERRIDES = ["data.resizer.height=64", "data.resizer.width=64",
             f"data.max_number_of_boxes={MAX_BOXES}", "model.neck.depth=16",
             "model.head_depth=16", "model.mask_head.head_depth=16",
             "model.mask_head.num_init_channels=8", "model.mask_head.mask_size=8",
             "model.post_processing.max_detections=10"]


def _config(*extra: str):
    return load_config("centernet_deepmac_shapes_demo", [*OVERRIDES, *extra])


def _batch(task, counts, seed=0) -> dict:
    """Random boxes of classes 0, 1, 2, ... whose masks fill the box's top half (on the
    stride-2 mask grid)."""
    batch = masked_box_batch(task, counts, MAX_BOXES, seed=seed, top_half=True)
    del batch["rng"]
    batch["classes"] = np.tile(np.arange(MAX_BOXES, dtype=np.int32) % 3, (len(counts), 1))
    return batch


@pytest.mark.slow
def test_masks_in_the_layout_train_step_compiles_once_and_predict_gives_masks():
    task = tasks.build_task(_config())
    layout = task.batch_layout()
    assert layout["masks"].shape == (MAX_BOXES, 32, 32) and layout["masks"].dtype == jnp.uint8
    tx = optax.sgd(1e-3)
    step = make_train_step(task, tx, optax.constant_schedule(1e-3))
    state = init_train_state(task, tx, ema=False)
    for counts in ([0, 0], [MAX_BOXES, MAX_BOXES], [1, 0]):
        state, metrics = step(state, _batch(task, counts))
        assert np.isfinite(float(metrics["loss"])) and np.isfinite(float(metrics["mask_loss"]))
        assert float(metrics["num_masks"]) == sum(counts)
        if counts == [0, 0]:
            assert float(metrics["mask_loss"]) == 0.0
    assert step._cache_size() == 1
    images = jnp.asarray(_batch(task, [2, 1])["images"])
    info = jnp.tile(jnp.array([[64.0, 64.0, 64.0, 48.0]]), (2, 1))
    det = jax.jit(task.predict)(state["params"], state["batch_stats"], images, info)
    assert det["masks"].shape == (2, 10, 8, 8) and det["masks"].dtype == jnp.float32
    masks = np.asarray(det["masks"])
    assert masks.min() >= 0.0 and masks.max() <= 1.0


@pytest.mark.slow
def test_the_mask_loss_is_tfs_over_the_allowed_classes():
    """The task's mask_loss equals TF's formula computed here from the mask logits of the
    same weights: per box the mean over its 8x8 pixels, summed over the boxes of classes 1
    and 2 (allowed), divided by their number; the total adds it times task_loss_weight 5."""
    task = tasks.build_task(_config("model.mask_head.allowed_masked_classes=[1, 2]"))
    params, stats = task.initial_variables()
    batch = {k: jnp.asarray(v) for k, v in _batch(task, [4, 2], seed=1).items()}
    total, (parts, _) = jax.jit(task.loss)(params, stats, batch)
    out, _ = jax.jit(lambda p, s, x, b: task.apply(p, s, x, train=True, mask_boxes=b))(
        params, stats, batch["images"], batch["boxes"])
    targets = dm.crop_instance_masks(batch["masks"], batch["boxes"], 8)
    per_box = np.asarray(jnp.mean(weighted_sigmoid_loss(out["mask_logits"], targets), (2, 3)))
    allowed = np.array([[0, 1, 1, 0], [0, 1, 0, 0]], np.float32)  # classes 0 1 2 0, valid
    expected = float((per_box * allowed).sum() / allowed.sum())
    assert float(parts["num_masks"]) == 3.0
    np.testing.assert_allclose(float(parts["mask_loss"]), expected, rtol=1e-4)
    others = (parts["heatmap_loss"] + 0.1 * parts["size_loss"] + parts["offset_loss"])
    np.testing.assert_allclose(float(total), float(others) + 5.0 * expected, rtol=1e-4)


@pytest.mark.slow
def test_the_mask_head_adds_its_parameters_and_fingerprint_but_not_to_box_only_models():
    config = _config()
    summary = tasks.family(config).summary(config)
    p = summary["parameters"]
    assert p["mask_net"] > 0 and p["embedding_heads"] > 0
    assert p["total"] == p["backbone"] + p["neck"] + p["heads"] + p["mask_net"]
    assert summary["mask_head"]["input_channels"] == 2 + 16 + 16
    fields = tasks.family(config).fingerprint_fields(config)
    assert fields["model"]["mask_head"]["network_type"] == "hourglass20"
    box_only = load_config("centernet_shapes_demo")
    assert "mask_head" not in tasks.family(box_only).fingerprint_fields(box_only)["model"]
    assert "mask_net" not in tasks.family(box_only).summary(box_only)["parameters"]


@pytest.mark.parametrize("extra, message", [
    (["data.load_masks=false"], "needs data.load_masks: true"),
    (["model.mask_head.allowed_masked_classes=[1, 3]"],
     "allowed_masked_classes: [3] are not classes of the model"),
])
def test_the_builder_refuses_what_cannot_train(extra, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        tasks.build_task(_config(*extra))


@pytest.mark.parametrize("extra, message", [
    (["model.mask_head.mask_size=6"], "use a multiple of 4"),
    (["model.mask_head.network_type=resnet4"], "hourglass10"),
    (["model.mask_head.predict_full_resolution_masks=true"], "False"),
    (["model.mask_head.jitter=1"], "jitter"),
])
def test_the_schema_names_the_bad_field(extra, message):
    with pytest.raises(Exception, match=message) as err:
        _config(*extra)
    assert "mask_head" in str(err.value)


def test_mask_networks_keep_their_input_size_and_the_schema_knows_their_stages():
    """Each network_type is TF's hourglass of that depth without the downsampling stem: a
    [M, S, S, C] input gives [M, S, S] logits; the schema's stage counts (the mask_size
    divisors it checks) are the networks' own."""
    for name, stages in MASK_NETWORK_STAGES.items():
        assert len(mask_network_spec(name, 4).channels) - 1 == stages
    assert mask_network_spec("hourglass52", 64).channels == (128, 128, 192, 192, 192, 256)
    assert mask_network_spec("hourglass100", 64).blocks == (4, 4, 4, 4, 4, 8)
    net = nnx.eval_shape(lambda: MaskNetwork("hourglass20", 5, 4, batch_norm=BatchNormParams(),
                                             rngs=nnx.Rngs(0)))
    out = abstract_call(net, jax.ShapeDtypeStruct((3, 8, 8, 5), jnp.float32))
    assert out.shape == (3, 8, 8)
