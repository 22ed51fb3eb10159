"""``jaxdet export``: each artifact is the whole model (uint8 images in, the TF OD API
exporter's outputs out) and, run by its own runtime, gives what ``jaxdet predict`` gives on the
same images: the same classes (as label-map ids), boxes within 1e-4 (normalized), scores within
1e-4, keypoints and masks within 1e-4, for an SSD-family model, a CenterNet with keypoints, an
FPN Faster R-CNN and a (C4) Mask R-CNN, at the model's input size and with the config's
resizer inside (TF's bilinear resize, keep-aspect-ratio padding). StableHLO runs with jax alone
(no jaxdet import, checked in a fresh process, any batch); ONNX in ONNX Runtime (a fixed batch;
skipped without ``make install-export``). Bad requests fail in one line and leave nothing
behind."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from PIL import Image

from jaxdet.cli.main import main
from jaxdet.config.loader import load_config
from jaxdet.export import ExportError
from jaxdet.export.runtimes import (
    assert_same_detections,
    load_artifact,
    near_tie_differences,
    predict_as_signature,
)
from jaxdet.jobs import runs
from jaxdet.jobs.detector import preprocess_images
from jaxdet.jobs.export_job import export_model
from untrained_workdir import untrained_workdir

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("export")]

TINY = ["data.resizer.height=64", "data.resizer.width=64",
        "data.train.num_images=8", "data.train.image_size=[64, 64]",
        "data.train.output_dir=data/train", "data.eval.num_images=4",
        "data.eval.image_size=[64, 64]", "data.eval.output_dir=data/eval",
        "data.max_number_of_boxes=8", "train.batch_size=4", "eval.batch_size=4",
        "parallel.data=1"]
FASTER_RCNN = ["model.first_stage_box_predictor_depth=16", "model.first_stage_max_proposals=16",
               "model.second_stage_batch_size=8", "model.initial_crop_size=6",
               "model.second_stage_post_processing.score_threshold=0.0",
               "model.second_stage_post_processing.max_total_detections=10",
               "model.second_stage_post_processing.max_detections_per_class=10"]
MODELS = {
    "ssd": ("shapes_demo", ["model.neck.depth=16", "model.head.depth=16"]),
    "center_net": ("centernet_keypoints_shapes_demo", ["model.neck.depth=16",
                                                       "model.head_depth=16"]),
    "ssd_keep_aspect_tf_resize": ("shapes_demo", [
        "model.neck.depth=16", "model.head.depth=16",
        "data.resizer={name: keep_aspect_ratio, min_dimension: 64, "
        "max_dimension: 64, method: tf_bilinear}"]),
    "faster_rcnn_fpn": ("faster_rcnn_fpn_shapes_demo", [
        *FASTER_RCNN, "model.neck.depth=16", "model.box_classifier_fc_depth=32"]),
    "mask_rcnn": ("mask_rcnn_shapes_demo", [*FASTER_RCNN, "model.mask_height=8",
                                            "model.mask_width=8",
                                            "model.mask_prediction_conv_depth=8"]),
}
RUNNER = textwrap.dedent("""
    import sys
    import numpy as np
    from jax import export
    exported = export.deserialize(open(sys.argv[1], "rb").read())
    out = exported.call(np.load(sys.argv[2])["images"])
    np.savez(sys.argv[3], **{k: np.asarray(v) for k, v in out.items()})
    assert not [m for m in sys.modules if m.startswith("jaxdet")], "jaxdet was imported"
""")


class _Workdirs:
    """name -> (config, workdir) of a toy model's step-0 workdir, made on its first request,
    once per test process."""

    def __init__(self, tmp_path_factory):
        self._factory, self._made = tmp_path_factory, {}

    def __getitem__(self, name: str):
        if name not in self._made:
            base, extra = MODELS[name]
            config = load_config(base, [*TINY, *extra])
            workdir = self._factory.mktemp(name)
            untrained_workdir(config, workdir)
            self._made[name] = (config, workdir)
        return self._made[name]


@pytest.fixture(scope="session")
def workdirs(tmp_path_factory):
    return _Workdirs(tmp_path_factory)


def _images(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, shape).astype(np.uint8)


def _jaxdet_predict(config, workdir, images: np.ndarray) -> dict:
    """What ``jaxdet predict`` computes: the eval transforms on the host, then the jitted
    ``task.predict`` with the restored weights."""
    task, state, _ = runs.load_for_inference(config, workdir)
    params, stats = runs.inference_variables(config, state)
    x, info = preprocess_images(config, images)
    return jax.device_get(jax.jit(task.predict)(params, stats, x, info))


def _run_artifact(out_dir, images, tmp_path) -> dict:
    np.savez(tmp_path / "in.npz", images=images)
    subprocess.run([sys.executable, "-c", RUNNER, str(out_dir / "model.stablehlo"),
                    str(tmp_path / "in.npz"), str(tmp_path / "out.npz")], check=True,
                   cwd=tmp_path, capture_output=True)
    return dict(np.load(tmp_path / "out.npz"))


def _layout_mask(config) -> np.ndarray:
    """[C, K]: each class's keypoint slots (squares 0..3, triangles 4..6 in the demo)."""
    mask = np.zeros((config.model.num_classes, 7), np.float32)
    mask[1, :4], mask[2, 4:] = 1.0, 1.0  # shapes: circle, square, triangle
    return mask


def _has_onnx() -> bool:
    try:
        import jax2onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


_NO_TF = importlib.util.find_spec("tensorflow") is None
_TF_SKIP = pytest.mark.skipif(_NO_TF, reason="TF formats need `make install-tf-export` (run "
                              "with `make test-tf-export`)")
FORMATS = ["stablehlo", pytest.param("onnx", marks=pytest.mark.skipif(
    not _has_onnx(), reason="ONNX export needs `make install-export`")),
    pytest.param("saved_model", marks=_TF_SKIP), pytest.param("tflite", marks=_TF_SKIP)]
FIXED_BATCH = {"onnx": 3, "tflite": 3}  # the others are exported for any batch


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name, size", [("ssd", (64, 64)), ("center_net", (64, 64)),
                                        ("ssd_keep_aspect_tf_resize", (48, 80)),
                                        ("faster_rcnn_fpn", (64, 64)), ("mask_rcnn", (64, 64))])
def test_artifact_equals_jaxdet_predict(workdirs, tmp_path, name, size, fmt):
    config, workdir = workdirs[name]
    out_dir = tmp_path / "exported"
    batch = FIXED_BATCH.get(fmt)
    result = export_model(config, workdir, out_dir, format=fmt, input_size=size,
                          batch_size=batch)
    assert result.signature["input"]["shape"] == [batch or "batch", *size, 3]
    images = _images((3, *size, 3))
    got = (_run_artifact(out_dir, images, tmp_path) if fmt == "stablehlo"
           else load_artifact(out_dir)(images))
    _assert_equal_to_predict(got, _jaxdet_predict(config, workdir, images), config, size)


def _assert_equal_to_predict(got: dict, det: dict, config, size) -> None:
    """The artifact's outputs ``got`` are ``jaxdet predict``'s detections ``det`` in the TF
    OD API's signature: same classes (label ids), boxes / scores / keypoints within 1e-4; or,
    where a runtime's rounding reorders candidates whose scores tie within 1e-4, equal score
    lists with at most 5% of the detections swapped (``near_tie_differences``)."""
    ids = np.arange(1, config.model.num_classes + 1)  # shapes: category ids 1..C
    want = predict_as_signature(det, size, ids, _layout_mask(config))
    try:
        assert_same_detections(got, want)
    except AssertionError as strict:
        ties = near_tie_differences(got, want)
        assert ties["ok"] and ties["swaps"] > 0, f"{strict}; near-tie check: {ties}"



@_TF_SKIP
def test_saved_model_takes_any_batch_and_encoded_images(workdirs, tmp_path):
    """One SavedModel serves batch 1 and 3; an ``encoded_image_string_tensor`` one decodes PNG
    (lossless) and JPEG bytes in the graph and gives predict's detections of the decoded
    pixels."""
    import io

    import tensorflow as tf

    config, workdir = workdirs["ssd"]
    export_model(config, workdir, tmp_path / "any", format="saved_model")
    images = _images((3, 64, 64, 3), seed=1)
    want = _jaxdet_predict(config, workdir, images)
    for batch in (1, 3):
        got = load_artifact(tmp_path / "any")(images[:batch])
        _assert_equal_to_predict(got, {k: v[:batch] for k, v in want.items()}, config,
                                 (64, 64))
    result = export_model(config, workdir, tmp_path / "encoded", format="saved_model",
                          input_type="encoded_image_string_tensor")
    assert result.signature["input"] == {
        "name": "input_tensor", "type": "encoded_image_string_tensor", "dtype": "string",
        "shape": ["batch"], "layout": "JPEG/PNG bytes of [64, 64, 3] RGB images"}
    for fmt in ("PNG", "JPEG"):
        blobs = []
        for image in images:
            buf = io.BytesIO()
            Image.fromarray(image).save(buf, format=fmt)
            blobs.append(buf.getvalue())
        decoded = np.stack([tf.io.decode_image(b, channels=3).numpy() for b in blobs])
        if fmt == "PNG":
            np.testing.assert_array_equal(decoded, images)
        got = load_artifact(tmp_path / "encoded")(np.asarray(blobs, dtype=object))
        _assert_equal_to_predict(got, _jaxdet_predict(config, workdir, decoded), config,
                                 (64, 64))


def test_cli_writes_the_artifact_and_refuses_bad_requests_in_one_line(workdirs, tmp_path,
                                                                     capsys):
    config, workdir = workdirs["ssd"]
    out = tmp_path / "cli"
    assert main(["export", "--workdir", str(workdir), "--out", str(out), "--batch-size",
                 "2"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["model.stablehlo", "signature.json"]
    assert "image_tensor uint8[2, 64, 64, 3]" in capsys.readouterr().out
    cases = [
        (["--format", "bogus"], "allowed stablehlo, onnx, saved_model, tflite"),
        (["--input-type", "encoded_image_string_tensor"], "cannot decode JPEG/PNG bytes"),
        (["--format", "tflite", "--input-type", "encoded_image_string_tensor"],
         "a tflite model cannot decode JPEG/PNG bytes (only saved_model can)"),
    ]
    if importlib.util.find_spec("tensorflow") is None:  # make test's venv: TF is an extra
        cases += [(["--format", "saved_model"], "needs TensorFlow: run `make install-tf-export`"),
                  (["--format", "tflite"], "needs TensorFlow: run `make install-tf-export`")]
    for extra, message in cases:
        target = tmp_path / "bad"
        assert main(["export", "--workdir", str(workdir), "--out", str(target), *extra]) == 1
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
        assert not target.exists()
    assert main(["export", "--workdir", str(workdir), "--out", str(out)]) == 1
    assert "is not empty" in capsys.readouterr().err


@pytest.mark.skipif(not _has_onnx(), reason="ONNX export needs `make install-export`")
def test_a_bf16_model_exports_to_onnx_in_float32(workdirs, tmp_path, caplog):
    """ONNX Runtime computes in float32: a bf16 config is exported in float32 (one warning)
    and its artifact equals predict at precision fp32."""
    config, workdir = workdirs["ssd"]
    bf16 = config.model_copy(update={"precision": "bf16"})
    export_model(bf16, workdir, tmp_path / "onnx", format="onnx", batch_size=2)
    assert "exporting the bf16 model in float32" in caplog.text
    images = _images((2, 64, 64, 3), seed=3)
    _assert_equal_to_predict(load_artifact(tmp_path / "onnx")(images),
                             _jaxdet_predict(config, workdir, images), config, (64, 64))


def test_a_workdir_without_checkpoint_writes_nothing(workdirs, tmp_path):
    config, _ = workdirs["ssd"]
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises((FileNotFoundError, ExportError)):
        export_model(config, empty, tmp_path / "never")
    assert not (tmp_path / "never").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["empty_run"]


ZOO = (Path(__file__).parents[1] / "interop" / "fixtures"
       / "tf_centernet_resnet50_v1_fpn_512x512_kpts_coco17_tpu-8")


@pytest.mark.xdist_group("tf_detectors")
def test_a_tf_zoo_checkpoint_exports_to_an_artifact_with_tfs_detections(tmp_path):
    """``jaxdet export --checkpoint ckpt-0`` of the TF2 zoo's CenterNet-R50 keypoint model
    (checkpoint written by the real TF OD API, tests/interop/fixtures): the StableHLO artifact,
    run with jax alone on the test image, gives TF's own 100 detections (label id = TF class
    + 1, scores within 2e-4, boxes within 1e-4) and the persons' 17 keypoints (within 1e-4)."""
    sys.path.insert(0, str(ZOO.parent))
    from tf_fixture_values import rebuild_data

    prefix = rebuild_data(ZOO, tmp_path / "ckpt" / "ckpt-0")
    config = load_config(ZOO / "jaxdet.yaml")
    export_model(config, None, tmp_path / "zoo", checkpoint=prefix, batch_size=1)
    image = np.asarray(Image.open(ZOO / "input.png").convert("RGB"))[None]
    got = {k: v[0] for k, v in _run_artifact(tmp_path / "zoo", image, tmp_path).items()}
    tf = np.load(ZOO / "outputs.npz")
    assert int(got["num_detections"]) == int(tf["num_detections"]) == 100
    free = list(range(100))
    for i, (cls, score, box) in enumerate(zip(tf["detection_classes"].astype(int),
                                              tf["detection_scores"], tf["detection_boxes"],
                                              strict=True)):
        j = next(j for j in free if got["detection_classes"][j] == cls + 1
                 and abs(got["detection_scores"][j] - score) <= 2e-4
                 and np.abs(got["detection_boxes"][j] - box).max() <= 1e-4)
        free.remove(j)
        if cls == 0:  # person: the keypoint task's class
            np.testing.assert_allclose(got["detection_keypoints"][j], tf["detection_keypoints"][i],
                                       atol=1e-4)
            np.testing.assert_allclose(got["detection_keypoint_scores"][j],
                                       tf["detection_keypoint_scores"][i], atol=1e-4)
