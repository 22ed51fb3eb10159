"""`jaxdet predict` end to end on a tiny trained workdir, and the samples.png of an evaluation.

The equivalence check: predict's JSON for an eval image equals the eval path's
detections.json for it (same checkpoint, same score threshold).
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxdet.cli.main import main
from jaxdet.config.loader import load_config
from jaxdet.eval.runner import SAMPLES_CELL_SIZE
from jaxdet.eval.visualize import title_height
from jaxdet.jobs.predict import find_images, predict_images

pytestmark = pytest.mark.xdist_group("predict")

SHARED_IMAGES = Path(__file__).parents[2].parent / "shared/data/images"
DETECTION_KEYS = {"bbox", "box_xyxy", "class_id", "class_name", "score"}


def _check_image_json(entry: dict, *, max_detections: int, min_score: float = 0.0) -> None:
    assert set(entry) == {"image", "width", "height", "detections"}
    width, height = entry["width"], entry["height"]
    with Image.open(entry["image"]) as original:
        assert original.size == (width, height)
    scores = [d["score"] for d in entry["detections"]]
    assert scores == sorted(scores, reverse=True) and len(scores) <= max_detections
    for d in entry["detections"]:
        assert set(d) == DETECTION_KEYS
        assert d["score"] >= min_score
        x0, y0, x1, y1 = d["box_xyxy"]
        assert 0 <= x0 <= x1 <= width and 0 <= y0 <= y1 <= height
        assert d["bbox"] == pytest.approx([x0, y0, x1 - x0, y1 - y0], abs=0.011)
        assert d["class_id"] in (1, 2, 3)
        assert d["class_name"] == ("circle", "square", "triangle")[d["class_id"] - 1]


@pytest.fixture(scope="module")
def folder(trained, tmp_path_factory) -> Path:
    """3 eval images (one in a subfolder), a grayscale and an RGBA PNG, a corrupt JPEG."""
    root = tmp_path_factory.mktemp("inputs")
    eval_images = trained / "data" / "eval" / "images"
    (root / "sub").mkdir()
    shutil.copy(eval_images / "000000.jpg", root / "000000.jpg")
    shutil.copy(eval_images / "000001.jpg", root / "sub" / "000001.JPG")
    shutil.copy(eval_images / "000002.jpg", root / "000002.jpeg")
    rgb = np.asarray(Image.open(eval_images / "000003.jpg"))
    Image.fromarray(rgb.mean(axis=2).astype(np.uint8), "L").save(root / "gray.png")
    rgba = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 128, np.uint8)], axis=2)
    Image.fromarray(rgba, "RGBA").save(root / "sub" / "alpha.png")
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg")
    (root / "notes.txt").write_text("not an image")
    return root


@pytest.fixture(scope="module")
def predicted(trained, folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("pred") / "out"
    code = main(["predict", "--workdir", str(trained), str(folder), "--out", str(out)])
    assert code == 0
    return out


def test_predict_folder_writes_json_and_drawn_images(predicted, folder):
    out = predicted
    names = ["000000", "000002", "gray", "sub/000001", "sub/alpha"]
    for name in names:
        entry = json.loads((out / f"{name}.json").read_text())
        _check_image_json(entry, max_detections=10)
        assert len(entry["detections"]) == 10  # score threshold 0.0: all the model returns
        with Image.open(out / f"{name}.jpg") as drawn, Image.open(entry["image"]) as original:
            assert drawn.size == original.size and drawn.mode == "RGB"
    assert not (out / "broken.json").exists() and not (out / "notes.json").exists()
    summary = json.loads((out / "predictions.json").read_text())
    assert summary["num_images"] == 5 and summary["num_detections"] == 50
    assert [s["image"] for s in summary["skipped"]] == [str(folder / "broken.jpg")]
    assert summary["skipped"][0]["reason"]
    assert summary["summary"].startswith("5 images, 50 detections, 1 skipped")
    assert [Path(e["image"]).name for e in summary["images"]] == [
        "000000.jpg", "000002.jpeg", "gray.png", "000001.JPG", "alpha.png"]
    assert summary["classes"] == [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"},
                                  {"id": 3, "name": "triangle"}]


def test_predict_equals_the_eval_detections(predicted, trained):
    """Same checkpoint, same score threshold: predict == eval's detections.json (1e-4)."""
    evaluated = json.loads((trained / "eval" / "step_6" / "detections.json").read_text())
    for name, image_id in [("000000", 1), ("sub/000001", 2), ("000002", 3)]:
        got = json.loads((predicted / f"{name}.json").read_text())["detections"]
        want = sorted((d for d in evaluated if d["image_id"] == image_id),
                      key=lambda d: -d["score"])
        assert len(got) == len(want) == 10
        for g, w in zip(got, want, strict=True):
            assert g["class_id"] == w["category_id"]
            np.testing.assert_allclose(g["bbox"], w["bbox"], atol=1e-4)
            np.testing.assert_allclose(g["score"], w["score"], atol=1e-4)


def test_predict_score_threshold_and_max_detections(trained, folder, tmp_path, capsys):
    out = tmp_path / "filtered"
    code = main(["predict", "--workdir", str(trained), str(folder / "000000.jpg"),
                 str(folder / "sub"), "--out", str(out), "--score-threshold", "0.05",
                 "--max-detections", "3", "--batch-size", "2"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "3 images" in printed and "0 skipped" in printed and str(out) in printed
    for name in ("000000", "000001", "alpha"):  # file input -> stem; folder -> relative name
        entry = json.loads((out / f"{name}.json").read_text())
        _check_image_json(entry, max_detections=3, min_score=0.05)


@pytest.mark.parametrize("layout, split", [
    (["parallel.data=4"], True),  # 4 images per batch, one per device
    (["parallel.data=2", "parallel.spatial=2"], True),  # 2 per data shard, height over 2
    (["parallel.data=3"], False),  # 4 does not split over 3: one device, and it says why
], ids=["data4", "data2_spatial2", "data3"])
def test_predict_over_a_mesh_equals_one_device(trained, folder, predicted, tmp_path, caplog,
                                               tiny_overrides, layout, split):
    config = load_config("shapes_demo", [*tiny_overrides, *layout])
    with caplog.at_level("INFO", logger="jaxdet"):
        summary = predict_images(config, trained, [folder], tmp_path / "out", batch_size=4,
                                 progress=False)
    assert ("splits each batch" in caplog.text) == split
    assert ("runs on one device" in caplog.text) == (not split)
    assert summary.num_images == 5
    for name in ("000000", "000002", "gray", "sub/000001", "sub/alpha"):
        got = json.loads((tmp_path / "out" / f"{name}.json").read_text())["detections"]
        want = json.loads((predicted / f"{name}.json").read_text())["detections"]
        assert [d["class_id"] for d in got] == [d["class_id"] for d in want]
        np.testing.assert_allclose([d["bbox"] for d in got], [d["bbox"] for d in want],
                                   atol=2e-3)
        np.testing.assert_allclose([d["score"] for d in got], [d["score"] for d in want],
                                   atol=1e-5)


def test_missing_input_exits_1_naming_it(trained, tmp_path, capsys):
    missing = tmp_path / "no_such_folder"
    code = main(["predict", "--workdir", str(trained), str(missing), "--out",
                 str(tmp_path / "o")])
    assert code == 1
    assert str(missing) in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_only_unreadable_images_exits_1_with_them_listed(trained, tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.png").write_bytes(b"")
    code = main(["predict", "--workdir", str(trained), str(tmp_path / "in"), "--out",
                 str(tmp_path / "o")])
    assert code == 1
    assert "none of the images could be read" in capsys.readouterr().err
    summary = json.loads((tmp_path / "o" / "predictions.json").read_text())
    assert summary["num_images"] == 0 and summary["images"] == []
    assert [s["image"] for s in summary["skipped"]] == [str(tmp_path / "in" / "empty.png")]


def test_no_images_is_a_value_error(trained_config, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.md").write_text("x")
    with pytest.raises(ValueError, match="no images.*empty"):
        predict_images(trained_config, tmp_path / "w", [tmp_path / "empty"], tmp_path / "o")


def test_find_images_names_sorted_unique(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "deep").mkdir(parents=True)
    b.mkdir()
    for path in [a / "x.png", a / "x.JPG", a / "deep" / "z.webp", a / "predictions.jpg",
                 b / "x.png", a / "skip.txt"]:
        path.write_bytes(b"")
    found = find_images([a, b, a / "x.png"], exclude=a / "deep")
    assert [(f.path.relative_to(tmp_path).as_posix(), f.name) for f in found] == [
        ("a/predictions.jpg", "predictions_jpg"),  # predictions.json is the summary
        ("a/x.JPG", "x"),
        ("a/x.png", "x_png"),
        ("b/x.png", "x_2"),
    ]
    with pytest.raises(FileNotFoundError, match="nope"):
        find_images([a, tmp_path / "nope"])


def test_eval_writes_a_samples_grid(trained):
    """eval.num_visualizations=2: two rows of (ground truth | predictions) cells."""
    with Image.open(trained / "eval" / "step_6" / "samples.png") as grid:
        width, height = grid.size
    # 64x80 eval images: longer side scaled to SAMPLES_CELL_SIZE, cells fit them tightly
    cell_w, cell_h, gap = SAMPLES_CELL_SIZE, SAMPLES_CELL_SIZE * 64 // 80, 4
    assert height == 2 * (title_height((cell_w, cell_h)) + cell_h) + 3 * gap
    assert width == 2 * cell_w + 3 * gap


@pytest.mark.skipif(not SHARED_IMAGES.is_dir(), reason="../shared/data/images not present")
def test_predict_on_shared_photos(trained, tmp_path):
    config = load_config(trained / "config.yaml")
    summary = predict_images(config, trained, [SHARED_IMAGES], tmp_path, max_detections=5,
                             progress=False)
    assert summary.num_images == len(list(SHARED_IMAGES.glob("*.jpg"))) and not summary.skipped
    for entry in summary.images:
        _check_image_json(entry, max_detections=5)
        name = Path(entry["image"]).stem
        with Image.open(tmp_path / f"{name}.jpg") as drawn:
            assert drawn.size == (entry["width"], entry["height"])


def test_predict_draws_at_its_own_threshold_and_keeps_all_in_json(trained, trained_config,
                                                                   folder, tmp_path,
                                                                   monkeypatch):
    """The JSON keeps every detection above the score threshold (0.0 here: all 10); the picture
    shows those >= the drawing threshold (default 0.3, as the eval sample grid)."""
    import jaxdet.results.detections as drawing_module

    drawn_scores = []
    real_draw = drawing_module.draw_detections

    def spy(image, boxes, classes, scores, names):
        drawn_scores.append(np.asarray(scores).tolist())
        return real_draw(image, boxes, classes, scores, names)

    monkeypatch.setattr(drawing_module, "draw_detections", spy)
    image = [str(folder / "000000.jpg")]
    predict_images(trained_config, trained, image, tmp_path / "all", draw_threshold=0.0,
                   progress=False)
    scores = [d["score"] for d in
              json.loads((tmp_path / "all" / "000000.json").read_text())["detections"]]
    assert len(drawn_scores[-1]) == len(scores) == 10
    third = sorted(drawn_scores[-1], reverse=True)[2]
    predict_images(trained_config, trained, image, tmp_path / "top3", draw_threshold=third,
                   progress=False)
    assert len(drawn_scores[-1]) == 3
    assert len(json.loads((tmp_path / "top3" / "000000.json").read_text())["detections"]) == 10
    assert json.loads((tmp_path / "top3" / "predictions.json").read_text())[
        "draw_threshold"] == third
    predict_images(trained_config, trained, image, tmp_path / "default", progress=False)
    assert all(s >= 0.3 for s in drawn_scores[-1])
