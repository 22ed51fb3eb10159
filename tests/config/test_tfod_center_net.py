"""pipeline.config -> jaxdet for CenterNet: the TF OD API's 7 CenterNet configs convert,
build with TF's parameter counts and train a step (the 4 DeepMAC ones: test_tfod_deepmac.py);
keypoint label maps are read (or the zoo's placeholder taken as COCO's person), and what does
not map is an error naming the file, line and field."""

from __future__ import annotations

import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.compare import differences
from jaxdet.config.label_map import format_label_map
from jaxdet.config.loader import load_config
from jaxdet.config.tfod import convert_pipeline_config, load_pipeline_config
from jaxdet.config.tfod_common import TfodConfigError
from jaxdet.data import build as data_build
from jaxdet.data.keypoints import COCO_PERSON_KEYPOINTS, COCO_PERSON_SIGMAS
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.center_net import build as center_net_build

from .conftest import center_net_batch_stats, train_one_step

TFOD_CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"
needs_shared = pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="../shared absent")

HG_512 = "centernet_hourglass104_512x512_coco17_tpu-8"
HG_512_KPTS = "centernet_hourglass104_512x512_kpts_coco17_tpu-32"
HG_1024 = "centernet_hourglass104_1024x1024_coco17_tpu-32"
HG_1024_KPTS = "centernet_hourglass104_1024x1024_kpts_coco17_tpu-32"
R101 = "centernet_resnet101_v1_fpn_512x512_coco17_tpu-8"  # its extractor is resnet_v2_101
R50_V1_KPTS = "centernet_resnet50_v1_fpn_512x512_kpts_coco17_tpu-8"
R50_V2_KPTS = "centernet_resnet50_v2_512x512_kpts_coco17_tpu-8"

# what each file says: (backbone, neck, input size, keypoints?, schedule, num_steps, restore)
EXPECTED = {
    HG_512: ("hourglass_104", "identity", 512, False, "manual_step", 140_000, "detection"),
    HG_512_KPTS: ("hourglass_104", "identity", 512, True, "cosine", 250_000, "detection"),
    HG_1024: ("hourglass_104", "identity", 1024, False, "cosine", 50_000, "detection"),
    HG_1024_KPTS: ("hourglass_104", "identity", 1024, True, "cosine", 250_000, "detection"),
    R101: ("resnet_v2_101", "center_net_deconv", 512, False, "manual_step", 140_000,
           "classification"),
    R50_V1_KPTS: ("resnet50", "center_net_fpn", 512, True, "cosine", 250_000, "classification"),
    R50_V2_KPTS: ("resnet_v2_50", "center_net_deconv", 512, True, "cosine", 250_000,
                  "classification"),
}
COCO_FLIP = (0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15)
# keypoint_label_to_std of the zoo's keypoint configs, in COCO's keypoint order
COCO_STD = (0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07,
            0.89, 0.89, 0.89, 0.89)
COCO_SKELETON = ((0, 1), (0, 2), (1, 3), (2, 4), (0, 5), (0, 6), (5, 7), (7, 9), (6, 8),
                 (8, 10), (5, 6), (5, 11), (6, 12), (11, 12), (11, 13), (13, 15), (12, 14),
                 (14, 16))

# TF 2.21's variable counts of each config's model (tests/config/fixtures/
# count_tf_center_net_models.py): trainable, all, extractor trainable, heads, head sets
TF_COUNTS = {
    HG_512: (191_289_148, 191_406_652, 187_700_352, 3_588_796, 2),
    HG_512_KPTS: (194_873_318, 194_990_822, 187_700_352, 7_172_966, 2),
    HG_1024: (191_289_148, 191_406_652, 187_700_352, 3_588_796, 2),
    HG_1024_KPTS: (194_873_318, 194_990_822, 187_700_352, 7_172_966, 2),
    R101: (48_860_254, 48_959_710, 48_392_960, 467_294, 1),
    R50_V1_KPTS: (25_742_195, 25_795_827, 24_809_920, 932_275, 1),
    R50_V2_KPTS: (30_315_699, 30_362_931, 29_383_424, 932_275, 1),
}
# TF's ResNet-v2 extractors hold the Keras ResNetV2's post_bn (2048 channels after the layer
# they read), never used; jaxdet does not build it: 2 x 2048 trainable, 4 x 2048 in all.
POST_BN = {R101: (4096, 8192), R50_V2_KPTS: (4096, 8192)}


def _load(name: str, overrides=()) -> object:
    return load_pipeline_config(TFOD_CONFIGS / f"{name}.config", overrides)


# ----------------------------------------------------------------- the zoo's configs


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_zoo_center_net_configs_convert_with_what_the_file_says(name):
    backbone, neck, size, keypoints, schedule, steps, restore = EXPECTED[name]
    c = _load(name)
    assert c.model.type == "center_net" and c.model.num_classes == 90
    assert (c.model.backbone.name, c.model.neck.name) == (backbone, neck)
    assert c.model.feature_level == 2 and c.model.head_depth == 256
    assert data_build.input_size(c.data) == (size, size)
    assert c.model.loss.alpha == 2.0 and c.model.loss.beta == 4.0
    assert c.model.loss.size_weight == pytest.approx(0.1)
    assert c.model.min_overlap == pytest.approx(0.7)
    assert c.model.post_processing.max_detections == 100
    assert c.train.optimizer.name == "adam" and c.train.optimizer.epsilon == pytest.approx(1e-7)
    assert c.train.optimizer.weight_decay == 0.0 and c.train.ema_decay is None
    assert c.train.learning_rate.name == schedule and c.train.num_steps == steps
    assert c.train.batch_size == 128 and c.train.init_checkpoint.restore == restore
    assert c.data.train.type == "tfrecord" and c.data.max_number_of_boxes == 100
    flip = c.data.augment[0]
    assert flip.name == "random_horizontal_flip"
    if not keypoints:
        assert c.model.keypoint_tasks == () and flip.keypoint_flip_permutation == ()
        return
    (task,) = c.model.keypoint_tasks
    assert (task.name, task.class_name) == ("human_pose", "/m/01g317")
    assert task.keypoints == COCO_PERSON_KEYPOINTS and len(task.keypoints) == 17
    assert task.std_dev == pytest.approx(COCO_STD)
    assert task.oks_sigmas == pytest.approx(COCO_PERSON_SIGMAS)  # the files list them in
    assert task.skeleton == COCO_SKELETON  # two orders; jaxdet's is the keypoints'
    assert (task.regression_weight, task.offset_peak_radius, task.per_keypoint_offset) == (
        pytest.approx(0.1), 3, True)
    assert task.score_distance_offset == 1.0  # TF's default
    assert flip.keypoint_flip_permutation == COCO_FLIP


@needs_shared
@pytest.mark.parametrize("name", [HG_512, R101, R50_V1_KPTS, R50_V2_KPTS])
def test_preprocessing_becomes_mean_and_std_per_rgb_channel(name, caplog):
    """Hourglass: the file's BGR means / stds, as R, G, B; ResNet-v1: caffe (ImageNet means,
    BGR in TF); ResNet-v2: x / 127.5 - 1. A warning names the channel order where TF's
    network sees BGR."""
    with caplog.at_level(logging.WARNING, logger="jaxdet.config"):
        c = _load(name)
    bgr = [r.message for r in caplog.records if "BGR channels" in r.message]
    if name == HG_512:
        assert c.data.mean == pytest.approx((119.9165958, 114.03422265, 104.01362025))
        assert c.data.std == pytest.approx((70.9150767, 69.89082075, 73.6027665))
        assert c.model.backbone.batch_norm.decay == 0.1
        assert c.model.backbone.batch_norm.epsilon == 1e-5
        assert len(bgr) == 1 and "bgr_ordering: true" in bgr[0]
    elif name == R50_V1_KPTS:
        assert c.data.mean == (123.68, 116.779, 103.939) and c.data.std == (1.0, 1.0, 1.0)
        assert len(bgr) == 1 and "first convolution's input channels reversed" in bgr[0]
    else:
        assert c.data.mean == (127.5,) * 3 and c.data.std == (127.5,) * 3
        assert bgr == []


def _diff(a, b) -> list[str]:
    return differences(a, b, labels=("converted", "shipped"))


@needs_shared
def test_resnet50_v1_fpn_converts_to_the_shipped_config_plus_keypoints():
    """The shipped centernet_resnet50_v1_fpn_512 is the box part of this zoo config: the
    conversion differs only by the keypoint task (and its flip permutation), the datasets,
    the starting checkpoint and eval settings TF's file sets for its TPU."""
    ours = _load(R50_V1_KPTS).model_dump(mode="json")
    ref = load_config("centernet_resnet50_v1_fpn_512").model_dump(mode="json")
    for part in (ours, ref):
        part.pop("name"), part.pop("description")
        part["data"].pop("train"), part["data"].pop("eval")
    assert ours["model"].pop("keypoint_tasks")[0]["name"] == "human_pose"
    assert ours["data"]["augment"][0].pop("keypoint_flip_permutation") == list(COCO_FLIP)
    ref["data"]["augment"][0].pop("keypoint_flip_permutation")
    ref["model"].pop("keypoint_tasks")
    assert set(_diff(ours, ref)) == {
        "train.init_checkpoint: converted {'path': 'PATH_TO_BE_CONFIGURED', 'format': 'tf', "
        "'restore': 'classification'} != shipped None",
        "eval.batch_size: converted 8 != shipped 1",
        "eval.num_visualizations: converted 10 != shipped 8",
        "train.tensorboard_tags: converted 'tf' != shipped 'jaxdet'",  # TF's dashboards
    }


# ----------------------------------------------------------------- keypoint label maps


def _zoo_label_map(person_keypoints=COCO_PERSON_KEYPOINTS, ids=None, person=True) -> str:
    """A label_map.txt as the zoo tarballs have it: COCO's classes, person with keypoints."""
    names = {1: "/m/01g317" if person else "/m/0199g", 2: "/m/0k4j"}
    ids = range(len(person_keypoints)) if ids is None else ids
    text = format_label_map(names, {1: list(zip(ids, person_keypoints, strict=True))})
    display = "person" if person else "bicycle"
    return text.replace("name: '/m/01g317'\n", "name: '/m/01g317'\n  display_name: 'person'\n"
                        ).replace("name: '/m/0199g'\n", f"name: '/m/0199g'\n  display_name: "
                                  f"'{display}'\n")


def _with_label_map(tmp_path: Path, label_map: str | None, name: str = R50_V1_KPTS) -> Path:
    """The zoo config ``name`` with keypoint_label_map_path pointing at ``label_map`` (written
    to tmp_path/label_map.txt; None: a path that does not exist)."""
    path = tmp_path / "label_map.txt"
    if label_map is not None:
        path.write_text(label_map)
    text = (TFOD_CONFIGS / f"{name}.config").read_text()
    text = text.replace('keypoint_label_map_path: "PATH_TO_BE_CONFIGURED"',
                        f'keypoint_label_map_path: "{path}"')
    config = tmp_path / "pipeline.config"
    config.write_text(text)
    return config


@needs_shared
def test_keypoint_label_map_is_read(tmp_path):
    """The label map's person keypoints (ids 0..16) in id order; the class takes the label
    map's display name (what the data sources call it)."""
    c = load_pipeline_config(_with_label_map(tmp_path, _zoo_label_map()))
    (task,) = c.model.keypoint_tasks
    assert task.class_name == "person" and task.keypoints == COCO_PERSON_KEYPOINTS
    assert task.oks_sigmas == pytest.approx(COCO_PERSON_SIGMAS)


@needs_shared
def test_keypoint_order_follows_the_label_map_ids(tmp_path):
    """Keypoints listed out of order in the label map are ordered by id; std_dev and
    oks_sigmas follow them."""
    shuffled = list(reversed(COCO_PERSON_KEYPOINTS))
    ids = list(reversed(range(17)))  # same id per name, listed backwards
    c = load_pipeline_config(_with_label_map(tmp_path, _zoo_label_map(shuffled, ids)))
    (task,) = c.model.keypoint_tasks
    assert task.keypoints == COCO_PERSON_KEYPOINTS
    assert task.std_dev == pytest.approx(COCO_STD)


@needs_shared
def test_label_map_without_the_class_names_it(tmp_path):
    config = _with_label_map(tmp_path, _zoo_label_map(person=False))
    with pytest.raises(TfodConfigError) as err:
        load_pipeline_config(config)
    message = str(err.value)
    assert message.startswith(f"{config}:") and "\n" not in message
    assert "model.center_net.keypoint_label_map_path" in message
    assert 'keypoint_class_name "/m/01g317"' in message and str(tmp_path) in message


@needs_shared
def test_missing_label_map_names_the_path_and_the_class(tmp_path):
    config = _with_label_map(tmp_path, None)
    with pytest.raises(TfodConfigError) as err:
        load_pipeline_config(config)
    message = str(err.value)
    assert str(tmp_path / "label_map.txt") in message and "not found" in message
    assert 'keypoint_class_name "/m/01g317"' in message


@needs_shared
def test_placeholder_label_map_is_coco_person_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet.config"):
        _load(R50_V2_KPTS)
    lines = [r.message for r in caplog.records if "keypoint_label_map_path" in r.message]
    assert len(lines) == 1 and "COCO's order" in lines[0]


@needs_shared
def test_placeholder_label_map_for_another_class_is_an_error(tmp_path):
    text = (TFOD_CONFIGS / f"{R50_V1_KPTS}.config").read_text()
    config = tmp_path / "pipeline.config"
    config.write_text(text.replace('keypoint_class_name: "/m/01g317"',
                                   'keypoint_class_name: "/m/0bt9lr"'))
    with pytest.raises(TfodConfigError) as err:
        load_pipeline_config(config)
    message = str(err.value)
    assert "model.center_net.keypoint_label_map_path: is the placeholder" in message
    assert 'keypoint_class_name "/m/0bt9lr"' in message and "set it" in message


# ----------------------------------------------------------------- hand-written configs

MINI = """
model {
  center_net {
    num_classes: 2
    feature_extractor { FEATURE_EXTRACTOR }
    image_resizer { keep_aspect_ratio_resizer { min_dimension: 128 max_dimension: 128
      pad_to_max_dimension: true } }
    object_detection_task { scale_loss_weight: 0.2 task_loss_weight: 0.5
      localization_loss { l1_localization_loss {} } }
    object_center_params { object_center_loss_weight: 2.0 max_box_predictions: 20
      peak_max_pool_kernel_size: 5 heatmap_bias_init: -3.0
      classification_loss { penalty_reduced_logistic_focal_loss { alpha: 2.0 beta: 4.0 } } }
    keypoint_label_map_path: "LABEL_MAP"
    keypoint_estimation_task {
      task_name: "corners"
      task_loss_weight: 2.0
      keypoint_class_name: "box"
      loss { localization_loss { l1_localization_loss {} }
        classification_loss { penalty_reduced_logistic_focal_loss { alpha: 2.0 beta: 4.0 } } }
      keypoint_label_to_std { key: "a" value: 0.5 }
      candidate_ranking_mode: "score_distance_ratio"
      num_candidates_per_keypoint: 10
      EXTRA
    }
  }
}
train_config { batch_size: 2 num_steps: 10
  optimizer { adam_optimizer { learning_rate { constant_learning_rate { learning_rate: 0.001 } } }
    use_moving_average: false } }
"""


def _mini(tmp_path: Path, fe: str = 'type: "resnet_v1_50_fpn"', extra: str = "",
          edit: tuple[str, str] | None = None) -> Path:
    """A small CenterNet pipeline.config with one keypoint task ("box": keypoints a, b) whose
    label map is in tmp_path."""
    label_map = tmp_path / "label_map.txt"
    label_map.write_text(format_label_map({1: "box", 2: "disc"}, {1: [(0, "a"), (1, "b")]}))
    text = (MINI.replace("FEATURE_EXTRACTOR", fe).replace("EXTRA", extra)
            .replace("LABEL_MAP", str(label_map)))
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    path = tmp_path / "pipeline.config"
    path.write_text(text)
    return path


def test_hand_written_center_net_maps_every_field(tmp_path):
    c = load_pipeline_config(_mini(tmp_path))
    m = c.model
    assert (m.backbone.name, m.backbone.stride_in_1x1, m.backbone.conv_bias) == (
        "resnet50", True, True)
    assert m.heatmap_bias_init == -3.0 and m.post_processing.peak_kernel == 5
    assert m.post_processing.max_detections == 20
    # task_loss_weight multiplies the task's weights, as TF's loss does
    assert (m.loss.heatmap_weight, m.loss.size_weight, m.loss.offset_weight) == (2.0, 0.1, 0.5)
    (task,) = m.keypoint_tasks
    assert (task.name, task.class_name, task.keypoints) == ("corners", "box", ("a", "b"))
    assert task.std_dev == (0.5, 1.0)  # TF: 1.0 for keypoints not in keypoint_label_to_std
    assert (task.heatmap_weight, task.offset_weight, task.regression_weight) == (2.0, 2.0, 2.0)
    assert task.candidate_ranking_mode == "score_distance_ratio" and task.num_candidates == 10
    assert task.oks_sigmas is None and task.skeleton == ()


def test_fields_without_effect_are_listed_not_dropped(tmp_path):
    """Fields TF reads only for options jaxdet refuses (or that change how, not what, TF
    computes) are in the explicit table: the same (INFO) or different (WARNING)."""
    path = _mini(tmp_path, extra="std_dev_multiplier: 2.0 per_keypoint_depth: true",
                 edit=("num_classes: 2", "num_classes: 2 compute_heatmap_sparse: true "
                       "output_prediction_dict: true"))
    conversion = convert_pipeline_config(path)
    same = {field for field, _ in conversion.same}
    assert same == {"model.center_net.compute_heatmap_sparse",
                    "model.center_net.keypoint_estimation_task.std_dev_multiplier",
                    "model.center_net.keypoint_estimation_task.per_keypoint_depth"}
    assert any(w.startswith("model.center_net.output_prediction_dict: ")
               for w in conversion.warnings)


@pytest.mark.parametrize("fe, backbone, neck, mean, std", [
    ('type: "mobilenet_v2_fpn" depth_multiplier: 0.5 use_separable_conv: true '
     'upsampling_interpolation: "bilinear"',
     {"name": "mobilenet_v2", "depth_multiplier": 0.5, "padding": "same"},
     {"name": "center_net_mobilenet_v2_fpn", "use_separable_conv": True,
      "upsampling_interpolation": "bilinear"}, (127.5,) * 3, (127.5,) * 3),
    ('type: "mobilenet_v2_fpn_sep_conv" channel_means: [10, 20, 30] channel_stds: [2, 2, 4]',
     {"name": "mobilenet_v2"}, {"name": "center_net_mobilenet_v2_fpn", "use_separable_conv": True},
     (265.0, 275.0, 540.0), (255.0, 255.0, 510.0)),
    ('type: "hourglass_10"', {"name": "hourglass_10"}, {"name": "identity", "level": 2},
     (0.0,) * 3, (1.0,) * 3),
    ('type: "resnet_v1_101_fpn" bgr_ordering: true channel_means: [1, 2, 3]',
     {"name": "resnet101"}, {"name": "center_net_fpn"},
     (3 + 103.939, 2 + 116.779, 1 + 123.68), (1.0,) * 3),
])
def test_feature_extractors_and_their_preprocessing(tmp_path, fe, backbone, neck, mean, std):
    """MobileNetV2-FPN options; preprocess_input after TF's means / stds: tf mode
    ((x - m) / s / 127.5 - 1); caffe after bgr_ordering (the two reversals cancel: RGB in)."""
    c = load_pipeline_config(_mini(tmp_path, fe))
    for key, value in backbone.items():
        assert getattr(c.model.backbone, key) == value, key
    for key, value in neck.items():
        assert getattr(c.model.neck, key) == value, key
    assert c.data.mean == pytest.approx(mean) and c.data.std == pytest.approx(std)


@pytest.mark.parametrize("fe, extra, edit, message", [
    ('type: "resnet_v1_18_fpn"', "", None,
     "model.center_net.feature_extractor.type: 'resnet_v1_18_fpn' is not supported; jaxdet "
     "supports resnet_v1_50_fpn, resnet_v1_101_fpn, resnet_v2_50"),
    ('type: "resnet_v1_50_fpn"', "predict_depth: true", None,
     "keypoint_estimation_task.predict_depth: True is not supported"),
    ('type: "resnet_v1_50_fpn"', 'candidate_ranking_mode: "gaussian_weighted"', None,
     "candidate_ranking_mode: 'gaussian_weighted' is not supported"),
    ('type: "resnet_v1_50_fpn"', 'keypoint_label_to_std { key: "z" value: 1.0 }', None,
     "keypoint_label_to_std: keys ['z'] are not keypoints of keypoint_class_name \"box\""),
    ('type: "resnet_v1_50_fpn"', "", ("object_center_loss_weight: 2.0",
                                      "object_center_loss_weight: 2.0 use_labeled_classes: true"),
     "object_center_params.use_labeled_classes: True is not supported"),
    ('type: "resnet_v1_50_fpn"', "", ("num_classes: 2", "num_classes: 2 post_processing {}"),
     "model.center_net.post_processing: not supported: jaxdet's CenterNet keeps the heatmap "
     "peaks without NMS"),
    ('type: "resnet_v1_50_fpn"', "heatmap_head_params { num_filters: [128, 128] "
     "kernel_sizes: [3, 3] }", None, "jaxdet's CenterNet heads have one 3x3 layer"),
    ('type: "resnet_v1_50_fpn"', "", ("loss { localization_loss { l1_localization_loss {} }\n",
                                      "loss { localization_loss { weighted_l2 {} }\n"),
     "keypoint_estimation_task.loss.localization_loss.weighted_l2: not supported"),
    ('type: "resnet_v1_50_fpn"', "", ('keypoint_class_name: "box"', 'keypoint_class_name: "x"'),
     'keypoint_class_name "x": '),
])
def test_what_does_not_map_is_an_error_naming_it(tmp_path, fe, extra, edit, message):
    path = _mini(tmp_path, fe, extra, edit)
    with pytest.raises(TfodConfigError) as err:
        load_pipeline_config(path)
    assert message in str(err.value) and str(err.value).startswith(f"{path}:")
    assert "\n" not in str(err.value)


def test_readers_and_eval_config_of_a_keypoint_task(tmp_path):
    """num_keypoints is checked; coco_keypoint_metrics' sigmas go to oks_sigmas in keypoint
    order (its class_label may be the display name); keypoint_edge becomes the skeleton."""
    tail = """
train_input_reader { num_keypoints: 2 tf_record_input_reader { input_path: "x.tfrecord" } }
eval_config { keypoint_edge { start: 0 end: 1 }
  parameterized_metric { coco_keypoint_metrics { class_label: "box"
    keypoint_label_to_sigmas { key: "b" value: 0.2 }
    keypoint_label_to_sigmas { key: "a" value: 0.1 }
  } } }"""
    path = _mini(tmp_path)
    path.write_text(path.read_text() + tail)
    (task,) = load_pipeline_config(path).model.keypoint_tasks
    assert task.oks_sigmas == (0.1, 0.2) and task.skeleton == ((0, 1),)
    path.write_text(path.read_text().replace("num_keypoints: 2", "num_keypoints: 17"))
    with pytest.raises(TfodConfigError, match=r"train_input_reader\.num_keypoints: 17 != the 2 "):
        load_pipeline_config(path)


def test_keypoint_ids_must_run_in_task_order(tmp_path):
    """jaxdet reads each object's keypoints as the tasks' keypoints laid end to end: a label
    map whose keypoint ids leave a gap is refused."""
    path = _mini(tmp_path)
    (tmp_path / "label_map.txt").write_text(
        format_label_map({1: "box"}, {1: [(3, "a"), (4, "b")]}))
    with pytest.raises(TfodConfigError, match=r"in task order, are \[3, 4\]"):
        load_pipeline_config(path)


# ----------------------------------------------------------------- parameter counts vs TF


def _summary(config) -> dict:
    """What ``jaxdet summary`` prints for the config (its family's summary: an abstract
    build, no weights computed; parameters only, no multiply-adds trace)."""
    return tasks.family(config).summary(config, flops=False)




@needs_shared
@pytest.mark.parametrize("name", sorted(TF_COUNTS))
@pytest.mark.slow
def test_parameter_counts_equal_tf(name):
    """Each converted config builds TF's network: the trainable counts of `jaxdet summary`
    equal TF's (ResNet-v2: less TF's unused post_bn), heads included (Hourglass-104: a set of
    heads on each of its two stacks, as TF)."""
    trainable, total, extractor, heads, _ = TF_COUNTS[name]
    unused_trainable, unused_total = POST_BN.get(name, (0, 0))
    p = _summary(_load(name))["parameters"]
    assert p["total"] == trainable - unused_trainable
    assert p["backbone"] + p["neck"] == extractor - unused_trainable
    assert p["total"] - p["backbone"] - p["neck"] == heads
    if name in (HG_512, R50_V1_KPTS, R101):  # the batch statistics: once per extractor
        stats = center_net_batch_stats(_load(name))
        assert p["total"] + stats == total - unused_total


# ----------------------------------------------------------------- build and train a step


def _fill(factory):
    """``factory()`` built abstractly, its weights drawn on the host (He-normal kernels,
    BatchNorm scale / variance in [0.5, 1.5], biases / means in [-0.1, 0.1]): a real random
    init of a ResNet or Hourglass costs seconds per model on a small CPU."""
    graphdef, state = nnx.split(abstract_build(factory))
    rng = np.random.default_rng(0)
    for path, var in nnx.to_flat_state(state):
        name = path[-1]
        if isinstance(var, nnx.RngKey):
            var.set_value(jax.random.key(0))
            continue
        if isinstance(var, nnx.RngCount):
            value = np.zeros(var.shape)
        elif name == "kernel":
            value = rng.standard_normal(var.shape) * np.sqrt(2.0 / np.prod(var.shape[:-1]))
        elif name in ("scale", "var"):
            value = rng.uniform(0.5, 1.5, var.shape)
        else:
            value = rng.uniform(-0.1, 0.1, var.shape)
        var.set_value(jnp.asarray(value, var.dtype))
    return nnx.merge(graphdef, state)


def _batch(task, size: int) -> dict:
    """One image, two boxes of class 0 (person: the keypoint class) with every keypoint
    labelled inside its box, in the task's batch layout."""
    layout = task.batch_layout()
    n = layout["boxes"].shape[0]
    rng = np.random.default_rng(0)
    boxes = np.zeros((1, n, 4), np.float32)
    boxes[0, :2] = [[0.1, 0.2, 0.6, 0.7], [0.3, 0.1, 0.9, 0.5]]
    valid = np.zeros((1, n), bool)
    valid[0, :2] = True
    batch = {"images": rng.normal(size=(1, size, size, 3)).astype(np.float32), "boxes": boxes,
             "classes": np.zeros((1, n), np.int32), "valid": valid,
             "ignore": np.zeros((1, n), bool)}
    if "keypoints" in layout:
        k = layout["keypoints"].shape[1]
        t = rng.uniform(0.0, 1.0, (1, n, k, 2))
        batch["keypoints"] = (boxes[:, :, None, :2] + t * (boxes[:, :, None, 2:]
                                                          - boxes[:, :, None, :2])
                              ).astype(np.float32)
        batch["keypoint_visibility"] = np.repeat(np.where(valid, 2, 0)[:, :, None], k,
                                                 axis=2).astype(np.int32)
    assert set(batch) == set(layout)
    return batch


def _train_one_step(name: str, size: int, monkeypatch) -> dict:
    """The converted config at ``size`` x ``size``, batch 1: its task (weights drawn on the
    host), its optimizer and one step through the generic train step."""
    config = _load(name, [f"data.resizer.min_dimension={size}",
                          f"data.resizer.max_dimension={size}", "train.batch_size=1",
                          "data.max_number_of_boxes=4"])
    build = center_net_build.build_center_net
    monkeypatch.setattr(center_net_build, "build_center_net",
                        lambda config, seed: _fill(lambda: build(config, seed=seed)))
    task = tasks.build_task(config, seed=0)
    return train_one_step(config, task, _batch(task, size))


@needs_shared
# both under -m exhaustive (45 s cold each): make test keeps the conversion's parameter counts
# against TF and CenterNet with keypoints trained end to end (e2e/test_center_net_train.py)
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", [R50_V1_KPTS, R50_V2_KPTS])
@pytest.mark.slow
def test_converted_config_trains_a_step(name, monkeypatch):
    """The keypoint configs of both ResNet families build and train one step at 128x128
    (~15-25 s each on 2 CPU cores, most of it compiling; the v2 one under -m exhaustive)."""
    metrics = _train_one_step(name, 128, monkeypatch)
    assert "human_pose/keypoint_heatmap_loss" in metrics


@needs_shared
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", [R101, HG_512, HG_512_KPTS, HG_1024, HG_1024_KPTS])
def test_converted_config_trains_a_step_exhaustive(name, monkeypatch):
    """The other five: ResNet-v2-101 and the four Hourglass-104 configs (187M parameters;
    128x128, the smallest input its stride allows)."""
    metrics = _train_one_step(name, 128, monkeypatch)
    assert ("human_pose/keypoint_heatmap_loss" in metrics) == ("kpts" in name)


@needs_shared
@pytest.mark.slow
def test_hourglass_104_keypoint_model_runs_abstractly():
    """Hourglass-104 with keypoints, built and run abstractly (no weights, no compile): two
    sets of heads (one per stack), each with the box and the 17-keypoint heads, at stride 4."""
    config = _load(HG_512_KPTS, ["data.resizer.min_dimension=128",
                                 "data.resizer.max_dimension=128", "data.max_number_of_boxes=4"])
    model = abstract_build(lambda: center_net_build.build_center_net(config, seed=0))
    model.eval()
    graphdef, state = nnx.split(model)
    out = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state,
                         jax.ShapeDtypeStruct((1, 128, 128, 3), jnp.float32))
    leaves = jax.tree.leaves(out)
    assert len(leaves) == 2 * 6 and all(x.shape[:3] == (1, 32, 32) for x in leaves)
    assert sorted({x.shape[3] for x in leaves}) == [2, 17, 34, 90]
