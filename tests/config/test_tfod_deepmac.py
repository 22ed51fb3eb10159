"""pipeline.config -> jaxdet for DeepMAC (the TF OD API's CenterNet with a mask head): the 4
zoo DeepMAC configs convert (``model.mask_head``, masks loaded and scored), build with TF's
parameter counts part by part (tests/config/fixtures/tf_deepmac_counts.json, written by
count_tf_deepmac_models.py in the TF peer) and train a step (under ``-m exhaustive``: about a
minute each, most of it compiling); every DeepMAC field jaxdet lacks is refused at a
non-default value with one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.config.tfod_common import TfodConfigError
from jaxdet.config.tfod_deepmac import DEFAULT_ONLY
from jaxdet.config.tfod_proto import message_descriptor
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.center_net import build as center_net_build

from .conftest import center_net_batch_stats, train_one_step
from .test_tfod_center_net import _fill

TFOD_CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"
needs_shared = pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="../shared absent")
TF_COUNTS = json.loads((Path(__file__).parent / "fixtures" / "tf_deepmac_counts.json")
                       .read_text())

VOC_512 = "center_net_deepmac_512x512_voc_only_tpu-32"
COCO_1024 = "center_net_deepmac_1024x1024_coco_tpu-128"
NON_VOC_1024 = "center_net_deepmac_1024x1024_non_voc_only_tpu-128"
VOC_1024 = "center_net_deepmac_1024x1024_voc_only_tpu-128"
# COCO's 20 VOC classes as TF label-map ids (person 1 ... tv 72), the configs' lists
VOC_IDS = (1, 2, 3, 4, 5, 6, 7, 9, 16, 17, 18, 19, 20, 21, 44, 62, 63, 64, 67, 72)
# what each file says: (input size, mask network, allowed ids: TF label-map ids)
EXPECTED = {
    VOC_512: (512, "hourglass52", VOC_IDS),
    COCO_1024: (1024, "hourglass100", ()),
    NON_VOC_1024: (1024, "hourglass100", "60 non-VOC ids"),
    VOC_1024: (1024, "hourglass100", VOC_IDS),
}


def _load(name: str, overrides=()):
    return load_pipeline_config(TFOD_CONFIGS / f"{name}.config", overrides)


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_zoo_deepmac_configs_convert_with_what_the_file_says(name):
    size, network, ids = EXPECTED[name]
    config = _load(name)
    m, mh = config.model, config.model.mask_head
    assert m.type == "center_net" and m.num_classes == 90
    assert m.backbone.name == "hourglass_104" and m.neck.name == "identity"
    assert (mh.dim, mh.pixel_embedding_dim, mh.mask_size) == (32, 16, 32)
    assert mh.use_xy and mh.use_instance_embedding and mh.num_init_channels == 64
    assert mh.network_type == network and mh.task_loss_weight == 5.0
    assert not mh.predict_full_resolution_masks and mh.postprocess_crop_size == 256
    if isinstance(ids, str):  # non_voc_only: the 60 ids that are neither VOC's nor gaps
        assert len(mh.allowed_masked_classes) == 60
        assert not {i - 1 for i in VOC_IDS} & set(mh.allowed_masked_classes)
    else:
        assert mh.allowed_masked_classes == tuple(i - 1 for i in ids)
    assert config.data.resizer.max_dimension == size and config.data.load_masks
    assert config.eval.metrics_set == ("coco_detection_metrics", "coco_mask_metrics")
    assert m.loss.size_weight == pytest.approx(0.1) and m.post_processing.max_detections == 100
    if size == 1024:  # the three share one network: only the allowed classes differ
        other = _load(COCO_1024).model.model_dump()
        assert {k: v for k, v in m.model_dump().items() if k != "mask_head"} == {
            k: v for k, v in other.items() if k != "mask_head"}
        assert {k: v for k, v in mh.model_dump().items() if k != "allowed_masked_classes"} == {
            k: v for k, v in other["mask_head"].items() if k != "allowed_masked_classes"}


def _summary(config) -> dict:
    return tasks.family(config).summary(config, flops=False)  # parameters only: no trace




@needs_shared
@pytest.mark.parametrize("name", [
    # the Hourglass-104 + Hourglass-100 network takes ~35 s to build abstractly: under
    # -m exhaustive; the 512 one (Hourglass-52 mask network) runs by default
    pytest.param(n, marks=pytest.mark.exhaustive) if "1024" in n else n
    for n in sorted(TF_COUNTS)])
@pytest.mark.slow
def test_parameter_counts_equal_tf_part_by_part(name):
    """`jaxdet summary` of the two networks (the 1024 configs share one) counts TF's
    trainable variables: the Hourglass-104 extractor, the box heads and the 1x3 embedding
    heads (a set per stack) and the mask network (Hourglass-52 / -100 on 50 input channels,
    and its 1x1 output conv); with the BatchNorm statistics, all of TF's variables."""
    tf = TF_COUNTS[name]
    parts = tf["parts"]
    summary = _summary(_load(name))
    p = summary["parameters"]
    assert p["total"] == tf["trainable"]
    assert p["backbone"] + p["neck"] == parts["feature_extractor"]["trainable"]
    assert p["heads"] - p["embedding_heads"] == parts["box_heads"]["trainable"]
    assert p["embedding_heads"] == parts["embedding_heads"]["trainable"]
    assert p["mask_net"] == parts["mask_net"]["trainable"]
    assert p["head_sets"] == tf["head_sets"] == 2
    assert summary["mask_head"]["input_channels"] == 2 + 16 + 32
    assert tf["embedding_kernels"]["PIXEL_EMBEDDING"][0][:2] == [1, 3]  # TF's 1x3 hidden conv
    assert p["total"] + center_net_batch_stats(_load(name)) == tf["all"]


@needs_shared
@pytest.mark.slow
def test_both_stacks_predict_masks_and_the_last_one_gives_the_detections_masks(monkeypatch):
    """The 1024 model run abstractly at 128x128 (no weights, no compile): the mask network
    reads each of Hourglass-104's two stacks' embeddings (the loss averages over both, as
    TF); predict gives one 32x32 mask per detection."""
    config = _load(COCO_1024, ["data.resizer.min_dimension=128",
                               "data.resizer.max_dimension=128", "data.max_number_of_boxes=4"])
    build = center_net_build.build_center_net
    monkeypatch.setattr(center_net_build, "build_center_net",
                        lambda config, seed: abstract_build(lambda: build(config, seed=seed)))
    task = tasks.build_task(config, seed=0)
    params, stats = task.initial_variables()
    images = jax.ShapeDtypeStruct((1, 128, 128, 3), jnp.float32)
    boxes = jax.ShapeDtypeStruct((1, 4, 4), jnp.float32)
    # eval mode: tracing train mode's BatchNorm updates is slow (nnx checks each update's
    # sharding, which a tracer answers by walking the whole trace)
    out, _ = jax.eval_shape(lambda p, s, x, b: task.apply(p, s, x, train=False, mask_boxes=b),
                            params, stats, images, boxes)
    for o in (*out["intermediate"], out):
        assert o["mask_logits"].shape == (1, 4, 32, 32)
        assert o["instance_embedding"].shape == (1, 32, 32, 32)
        assert o["pixel_embedding"].shape == (1, 32, 32, 16)
    info = jax.ShapeDtypeStruct((1, 4), jnp.float32)
    det = jax.eval_shape(task.predict, params, stats, images, info)
    assert det["masks"].shape == (1, 100, 32, 32)


# ----------------------------------------------------------------- build and train a step


def _batch(task) -> dict:
    """One image, two boxes (person, a VOC class, and truck, not one: TF ids 1 and 8) with
    masks filling their top halves, in the task's batch layout."""
    layout = task.batch_layout()
    rng = np.random.default_rng(0)
    batch = {k: np.zeros((1, *f.shape), f.dtype) for k, f in layout.items()}
    batch["images"] = rng.normal(size=batch["images"].shape).astype(np.float32)
    batch["boxes"][0, :2] = [[0.1, 0.2, 0.6, 0.7], [0.3, 0.1, 0.9, 0.5]]
    batch["classes"][0, :2] = [0, 7]
    batch["valid"][0, :2] = True
    _, _, mh, mw = batch["masks"].shape
    for i, (y0, x0, y1, x1) in enumerate(batch["boxes"][0, :2]):
        batch["masks"][0, i, int(y0 * mh):int((y0 + y1) / 2 * mh), int(x0 * mw):int(x1 * mw)] = 1
    return batch


def _train_one_step(name: str, monkeypatch) -> dict:
    """The converted config at 128x128 (Hourglass-104's smallest input), batch 1, 4 boxes:
    its task (weights drawn on the host), its optimizer, one generic train step."""
    config = _load(name, ["data.resizer.min_dimension=128", "data.resizer.max_dimension=128",
                          "train.batch_size=1", "data.max_number_of_boxes=4"])
    build = center_net_build.build_center_net
    monkeypatch.setattr(center_net_build, "build_center_net",
                        lambda config, seed: _fill(lambda: build(config, seed=seed)))
    task = tasks.build_task(config, seed=0)
    metrics = train_one_step(config, task, _batch(task))
    assert np.isfinite(float(metrics["mask_loss"])) and float(metrics["mask_loss"]) > 0
    return metrics


@needs_shared
@pytest.mark.slow
@pytest.mark.exhaustive  # ~1 min, most of it compiling Hourglass-104 + the mask network
def test_the_512_config_trains_a_step(monkeypatch):
    """Hourglass-104 + Hourglass-52 mask network, both stacks' embeddings through the mask
    network (~2 min on 2 busy CPU cores, most of it compiling); of its two boxes only the
    person (a VOC class) takes part in the mask loss."""
    metrics = _train_one_step(VOC_512, monkeypatch)
    assert float(metrics["num_masks"]) == 1.0 and float(metrics["num_objects"]) == 2.0


@needs_shared
@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", [COCO_1024, NON_VOC_1024, VOC_1024])
def test_the_1024_configs_train_a_step(name, monkeypatch):
    metrics = _train_one_step(name, monkeypatch)
    assert float(metrics["num_masks"]) == {COCO_1024: 2.0, NON_VOC_1024: 1.0,
                                           VOC_1024: 1.0}[name]


# ----------------------------------------------------------------- what does not map


def _edited(tmp_path: Path, old: str, new: str, name: str = VOC_512) -> Path:
    """The zoo config ``name`` with every ``old`` replaced by ``new``."""
    text = (TFOD_CONFIGS / f"{name}.config").read_text()
    assert old in text
    path = tmp_path / "pipeline.config"
    path.write_text(text.replace(old, new))
    return path


def _other_enum_value(name: str, value: str) -> str:
    """Another value of the enum of DeepMAC field ``name`` (TF's message lists them)."""
    message = message_descriptor("object_detection.protos.CenterNet.DeepMACMaskEstimation")
    values = message.fields_by_name[name].enum_type.values_by_name
    return next(v for v in values if v != value)


NON_DEFAULT = {name: ("true" if value is False else "false" if value is True
                      else _other_enum_value(name, value) if isinstance(value, str)
                      else repr(value + 1))
               for name, value in DEFAULT_ONLY.items()}


@needs_shared
@pytest.mark.parametrize("field", sorted(DEFAULT_ONLY))
def test_every_unsupported_deepmac_field_is_refused_at_a_non_default_value(tmp_path, field):
    path = _edited(tmp_path, "      dim: 32\n", f"      dim: 32\n      {field}: "
                   f"{NON_DEFAULT[field]}\n")
    with pytest.raises(TfodConfigError) as err:
        load_pipeline_config(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}:")
    assert f"model.center_net.deepmac_mask_estimation.{field}: " in message
    assert "is not supported; jaxdet supports" in message


@needs_shared
def test_a_default_value_written_out_is_accepted(tmp_path):
    path = _edited(tmp_path, "      dim: 32\n", "      dim: 32\n      max_roi_jitter_ratio: 0.0"
                   "\n      jitter_mode: DEFAULT\n      use_only_last_stage: false\n")
    assert load_pipeline_config(path).model.mask_head.dim == 32


@needs_shared
@pytest.mark.parametrize("old, new, message", [
    ('network_type: "hourglass52"', 'network_type: "resnet4"',
     "deepmac_mask_estimation.network_type: 'resnet4' is not supported; jaxdet supports "
     "'hourglass10' or 'hourglass20' or 'hourglass32' or 'hourglass52' or 'hourglass100'"),
    ("weighted_sigmoid {}", "weighted_dice_classification_loss {}",
     "classification_loss.weighted_dice_classification_loss: not supported; jaxdet supports "
     "weighted_sigmoid"),
    ("load_instance_masks: true", "load_instance_masks: false",
     "train_input_reader.load_instance_masks: DeepMAC (deepmac_mask_estimation) trains on "
     "instance masks"),
    ("    deepmac_mask_estimation {", "    keypoint_estimation_task { task_name: 'k' }\n"
     "    deepmac_mask_estimation {",
     "model.center_net.keypoint_estimation_task: not supported beside deepmac_mask_estimation"),
])
def test_what_does_not_map_is_one_line_naming_the_field(tmp_path, old, new, message):
    path = _edited(tmp_path, old, new)
    with pytest.raises(TfodConfigError) as err:
        load_pipeline_config(path)
    assert "\n" not in str(err.value) and message in str(err.value)


@needs_shared
def test_mask_classes_outside_the_model_are_dropped_as_tf_ignores_them(tmp_path, caplog):
    """The zoo's VOC list kept in a config edited down to 3 classes: TF matches no box to ids 4
    and up, so jaxdet keeps 1-3 and says so; a list with none of the model's ids would train
    no mask at all (TF) and is refused."""
    path = _edited(tmp_path, "num_classes: 90", "num_classes: 3")
    with caplog.at_level("WARNING", logger="jaxdet.config"):
        config = load_pipeline_config(path)
    assert config.model.mask_head.allowed_masked_classes == (0, 1, 2)
    assert "allowed_masked_classes_ids: [4, 5, 6, 7, 9, 16, 17, 18, 19, 20, 21, 44, 62, 63, " \
           "64, 67, 72] are not label-map ids of the model's classes (1..3)" in caplog.text
    text = path.read_text().replace("        1,   # person\n        2,   # bicycle\n"
                                    "        3,   # car\n", "")
    path.write_text(text)
    with pytest.raises(TfodConfigError) as err:
        load_pipeline_config(path)
    assert "\n" not in str(err.value)
    assert "no class would train its masks" in str(err.value)
