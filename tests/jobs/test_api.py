"""The Python API on the suite's tiny trained workdir: predict on arrays, PIL images and paths
equals `jaxdet predict` on the same files; a second call does not compile again; evaluate and
train-then-resume from Python equal the command's runs; every bad input raises the documented
exception naming it."""

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
from PIL import Image

import jaxdet
from jaxdet.cli.main import main
from jaxdet.data.decode import load_image

pytestmark = pytest.mark.xdist_group("predict")


@pytest.fixture(scope="module")
def images(trained, tmp_path_factory) -> list[Path]:
    """Three eval JPEGs of 80x64 and a 50x70 PNG crop (photos are not all one size)."""
    root = tmp_path_factory.mktemp("api_inputs")
    eval_images = trained / "data" / "eval" / "images"
    paths = []
    for k in range(3):
        paths.append(root / f"{k:06d}.jpg")
        shutil.copy(eval_images / f"{k:06d}.jpg", paths[-1])
    crop = np.asarray(Image.open(eval_images / "000003.jpg"))[:50, :70]
    Image.fromarray(crop).save(root / "crop.png")
    return [*paths, root / "crop.png"]


@pytest.fixture(scope="module")
def command_json(trained, images, tmp_path_factory) -> dict[str, dict]:
    """`jaxdet predict` of the images at batch 4: each image's JSON by file name."""
    out = tmp_path_factory.mktemp("api_cli") / "out"
    assert main(["predict", "--workdir", str(trained), *map(str, images), "--out", str(out),
                 "--batch-size", "4"]) == 0
    return {Path(p).stem: json.loads((out / f"{Path(p).stem}.json").read_text())
            for p in images}


@pytest.fixture(scope="module")
def detector(trained):
    return jaxdet.load(trained, batch_size=4)


def test_predict_on_arrays_and_paths_equals_the_command(detector, images, command_json):
    arrays = [load_image(p) for p in images]
    from_arrays = detector.predict(arrays)
    from_paths = detector.predict(images)
    assert len(from_arrays) == len(images) == len(from_paths)
    for path, a, p in zip(images, from_arrays, from_paths, strict=True):
        want = command_json[path.stem]
        assert p.to_dict() == want  # the same JSON, the file's name included
        assert a.to_dict()["detections"] == want["detections"]
        assert a.source is None and a.image_size == (want["height"], want["width"])
        assert len(want["detections"]) > 0


def test_the_repr_says_where_the_weights_came_from(detector, trained):
    h, w = detector.input_size
    assert repr(detector) == (f"Detector(ssd, 3 classes, input {h}x{w}, weights: workdir "
                              f"{trained} step 6)")
    assert detector.step == 6


def test_one_image_at_batch_1_matches_and_a_pil_image_is_the_same(detector, images,
                                                                  command_json):
    pixels = load_image(images[3])
    one = detector.predict(pixels, batch_size=1)
    assert isinstance(one, jaxdet.Detections)
    want = command_json[images[3].stem]["detections"]
    assert len(one) == len(want)
    np.testing.assert_allclose(one.boxes, [d["box_xyxy"] for d in want], atol=0.02)
    np.testing.assert_allclose(one.scores, [d["score"] for d in want], atol=1e-5)
    assert one.class_names == [d["class_name"] for d in want]
    pil = detector.predict(Image.fromarray(pixels), batch_size=1)
    np.testing.assert_array_equal(pil.boxes, one.boxes)
    floats = detector.predict(pixels.astype(np.float32), batch_size=1)  # 0..255 floats
    np.testing.assert_array_equal(floats.scores, one.scores)


def test_a_second_call_at_the_same_batch_size_does_not_compile(trained, images):
    detector = jaxdet.load(trained)
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kw: compiles.append(event)
        if event == "/jax/core/compile/backend_compile_duration" else None)
    first = detector.predict(images[0])
    after_first = len(compiles)
    second = detector.predict(load_image(images[3]))  # another image size, the same program
    assert after_first >= 1 and len(compiles) == after_first
    assert first.image_size != second.image_size


def test_detections_views(detector, images):
    found = detector.predict(images[0])
    rows = found.to_coco(image_id=7)
    assert len(rows) == len(found) and {r["image_id"] for r in rows} == {7}
    assert rows[0]["bbox"] == found.to_dict()["detections"][0]["bbox"]
    assert rows[0]["category_id"] == int(found.class_ids[0])
    assert json.loads(found.to_json()) == found.to_dict()
    picture = found.draw()
    assert picture.size == (found.image_size[1], found.image_size[0])
    strong = found.above(float(found.scores[0]))
    assert len(strong) >= 1 and np.all(strong.scores >= found.scores[0])
    x0, y0, x1, y1 = found.boxes.T
    assert np.all(x0 <= x1) and np.all(y0 <= y1) and np.all(x1 <= found.image_size[1])


@pytest.mark.parametrize("bad, error, words", [
    (np.zeros((8, 8, 4), np.uint8), ValueError, "shape (8, 8, 4)"),
    (np.zeros((8, 8, 3), bool), TypeError, "bool"),
    (np.full((8, 8, 3), 0.5, np.float32), ValueError, "multiply by 255"),
    (np.full((8, 8, 3), 300.0, np.float32), ValueError, "0..255"),
    (np.zeros((0, 8, 3), np.uint8), ValueError, "empty"),
    ({"not": "an image"}, TypeError, "dict"),
])
def test_bad_arrays_raise_naming_the_input(detector, bad, error, words):
    with pytest.raises(error, match="image 1 of 2") as caught:
        detector.predict([np.zeros((8, 8, 3), np.uint8), bad])
    assert words in str(caught.value)


def test_bad_files_raise_naming_the_file(detector, tmp_path):
    missing = tmp_path / "nowhere.jpg"
    with pytest.raises(FileNotFoundError, match="nowhere.jpg"):
        detector.predict(missing)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    with pytest.raises(jaxdet.CorruptImageError, match="broken.jpg"):
        detector.predict(str(broken))
    with pytest.raises(ValueError, match="is a folder"):
        detector.predict(tmp_path)


def test_bad_models_raise_naming_them(trained, tmp_path, tiny_overrides):
    with pytest.raises(jaxdet.ConfigError, match="no_such_run"):
        jaxdet.load(workdir=tmp_path / "no_such_run")
    with pytest.raises(jaxdet.ConfigError, match="neither config.yaml"):
        jaxdet.load(tmp_path)
    with pytest.raises(jaxdet.ConfigError, match="no_such_config"):
        jaxdet.load("no_such_config")
    # a workdir trained with another model configuration
    with pytest.raises(jaxdet.WorkdirMismatch):
        jaxdet.load("shapes_demo", workdir=trained,
                    overrides=[*tiny_overrides, "model.neck.depth=8"])
    # its weights imported into another model: a tensor does not fit
    with pytest.raises(jaxdet.CheckpointError, match=str(trained)):
        jaxdet.load("shapes_demo", checkpoint=trained,
                    overrides=[*tiny_overrides, "model.neck.depth=8"])


def test_evaluate_from_python_equals_training_evaluation(detector, trained, tmp_path):
    metrics = detector.evaluate(tmp_path / "eval", progress=False)
    want = json.loads((trained / "eval" / "step_6" / "metrics.json").read_text())
    assert metrics["step"] == 6 and metrics["out_dir"] == str(tmp_path / "eval")
    assert metrics["AP"] == pytest.approx(want["AP"], abs=1e-9)
    assert metrics["AP50"] == pytest.approx(want["AP50"], abs=1e-9)


def test_train_from_python_then_resume_equals_the_command(tiny_overrides, tmp_path):
    """3 steps from Python, then resumed to 6, against the command's 6-step run: the same
    checkpointed weights and the same evaluation."""
    api_dir, cli_dir = tmp_path / "api", tmp_path / "cli"
    first = jaxdet.fit("shapes_demo", api_dir, progress=False,
                         overrides=[*tiny_overrides, "train.num_steps=3"])
    assert (first.step, first.steps_run) == (3, 3) and first.eval_metrics is not None
    resumed = jaxdet.fit("shapes_demo", api_dir, progress=False, overrides=tiny_overrides)
    assert (resumed.step, resumed.steps_run) == (6, 3)
    sets = [arg for item in tiny_overrides for arg in ("--set", item)]
    assert main(["train", "--config", "shapes_demo", *sets, "--workdir", str(cli_dir)]) == 0
    cli_metrics = json.loads((cli_dir / "eval" / "step_6" / "metrics.json").read_text())
    assert resumed.eval_metrics["AP"] == pytest.approx(cli_metrics["AP"], abs=1e-9)
    ours = jaxdet.load(api_dir).variables
    theirs = jaxdet.load(cli_dir).variables
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
                 ours, theirs)
    assert jaxdet.fit("shapes_demo", api_dir, progress=False,
                        overrides=tiny_overrides).steps_run == 0  # complete: nothing to do


def test_export_from_python_runs_as_predict(detector, tmp_path):
    """A StableHLO artifact written by ``Detector.export`` gives ``predict``'s detections (the
    TF OD API's signature: normalized (ymin, xmin, ymax, xmax) boxes, category ids)."""
    from jaxdet.export.runtimes import load_artifact

    result = detector.export(tmp_path / "artifact")
    assert (result.out_dir / "signature.json").is_file()
    images = np.random.default_rng(0).integers(0, 256, (2, 64, 64, 3)).astype(np.uint8)
    out = load_artifact(tmp_path / "artifact")(images)
    for i, found in enumerate(detector.predict(images, score_threshold=0.0)):
        n = int(out["num_detections"][i])
        assert n == len(found)
        np.testing.assert_allclose(out["detection_scores"][i][:n], found.scores, atol=1e-5)
        np.testing.assert_allclose(out["detection_boxes"][i][:n] * 64, found.boxes_yxyx,
                                   atol=1e-3)
        np.testing.assert_array_equal(out["detection_classes"][i][:n], found.class_ids)
    with pytest.raises(jaxdet.ExportError, match="not empty"):
        detector.export(tmp_path / "artifact")


def _star_photos(n: int, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``n`` 72x96 images with one bright square each, and its pixel (x0, y0, x1, y1) box."""
    rng = np.random.default_rng(seed)
    images, boxes = [], []
    for _ in range(n):
        image = rng.integers(0, 60, (72, 96, 3)).astype(np.uint8)
        x0, y0 = int(rng.integers(4, 60)), int(rng.integers(4, 36))
        image[y0:y0 + 24, x0:x0 + 28] = (250, 220, 30)
        images.append(image)
        boxes.append(np.array([[x0, y0, x0 + 28, y0 + 24]], np.float32))
    return images, boxes


def test_fine_tune_from_memory_restores_freezes_and_resumes(trained, tmp_path, tiny_overrides):
    """The few-shot recipe from arrays: the backbone and neck keep the pretrained weights, the
    1-class predictor is new, the run resumes (nothing more to do), and other images in the
    same workdir are refused."""
    images, boxes = _star_photos(3)
    workdir = tmp_path / "ducky"
    result = jaxdet.fine_tune(trained, images, boxes, workdir, class_names=["duck"], steps=4,
                              batch_size=2, progress=False)
    assert (result.step, result.steps_run) == (4, 4)
    tuned, pretrained = result.detector(), jaxdet.load(trained)
    assert tuned.class_names == ["duck"] and tuned.config.model.num_classes == 1
    params, before = tuned.variables[0], pretrained.variables[0]
    jax.tree.map(np.testing.assert_array_equal, params["backbone"], before["backbone"])
    jax.tree.map(np.testing.assert_array_equal, params["neck"], before["neck"])
    head = jax.tree.leaves(params["head"])
    assert any(not np.array_equal(a, b) for a, b in
               zip(head, jax.tree.leaves(before["head"]), strict=False) if a.shape == b.shape)
    found = tuned.predict(images[0])
    assert set(found.class_names) <= {"duck"}
    again = jaxdet.fine_tune(trained, images, boxes, workdir, class_names=["duck"], steps=4,
                             batch_size=2, progress=False)
    assert again.steps_run == 0
    with pytest.raises(jaxdet.WorkdirMismatch, match="other images"):
        jaxdet.fine_tune(trained, images[:2], boxes[:2], workdir, class_names=["duck"],
                         steps=4, batch_size=2, progress=False)


@pytest.mark.parametrize("boxes, words", [
    ([np.zeros((1, 3))], "shape (1, 3)"),
    ([np.array([[10.0, 10.0, 5.0, 20.0]])], "has no area"),
])
def test_fine_tune_names_the_bad_boxes(trained, tmp_path, boxes, words):
    with pytest.raises(ValueError, match="image 0 of 1") as caught:
        jaxdet.fine_tune(trained, [np.zeros((32, 32, 3), np.uint8)], boxes, tmp_path / "w")
    assert words in str(caught.value)
    with pytest.raises(ValueError, match="2 images, 1 box lists"):
        jaxdet.fine_tune(trained, [np.zeros((8, 8, 3), np.uint8)] * 2, boxes, tmp_path / "w")
