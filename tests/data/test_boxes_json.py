"""The normalized-boxes JSON of the TF2 few-shot example (``{"images": {file: [[ymin, xmin,
ymax, xmax], ...]}}``) as a one-class source, and its conversion to COCO."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxdet.cli.main import main
from jaxdet.data.boxes_json import BoxesJsonSource

DUCKY = Path(__file__).parents[2].parent / "shared" / "data" / "ducky"


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (200, 100)).save(tmp_path / "imgs" / "a.jpg")
    Image.new("RGB", (50, 80)).save(tmp_path / "imgs" / "b.png")
    (tmp_path / "boxes.json").write_text(json.dumps({"images": {
        "a.jpg": [[0.1, 0.2, 0.5, 0.6],      # kept: pixels (10, 40, 50, 120)
                  [0.5, 0.5, 0.4, 0.9],      # ymax < ymin: dropped
                  [0.9, 0.9, 1.2, 1.1]],     # partly outside: clipped to (90, 180, 100, 200)
        "b.png": [],                          # kept, no objects
        "missing.jpg": [[0, 0, 1, 1]]}}))     # no such file: dropped
    return tmp_path


def test_boxes_json_source_by_hand(folder, caplog):
    source = BoxesJsonSource(folder / "boxes.json", folder / "imgs", class_name="duck")
    assert len(source) == 2 and source.category_names == ["duck"]
    a, b = source[0], source[1]
    assert (a["height"], a["width"], a["image_id"]) == (100, 200, 1)
    np.testing.assert_allclose(a["boxes"], [[10, 40, 50, 120], [90, 180, 100, 200]])
    assert a["classes"].tolist() == [0, 0] and b["boxes"].shape == (0, 4)
    assert source.skips["degenerate_box"] == 1 and source.skips["unreadable_image"] == 1
    assert source.skips["box_clipped"] == 1
    assert "missing.jpg" in caplog.text


def test_bad_boxes_files_are_named(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "x.json").write_text('{"boxes": []}')
    with pytest.raises(ValueError, match="x.json: expected"):
        BoxesJsonSource(tmp_path / "x.json", tmp_path / "imgs")
    with pytest.raises(FileNotFoundError, match="boxes file not found"):
        BoxesJsonSource(tmp_path / "nope.json", tmp_path / "imgs")


@pytest.mark.skipif(not DUCKY.is_dir(), reason="../shared/data/ducky is not here")
def test_the_rubber_ducky_converts_to_coco(tmp_path, capsys):
    out = tmp_path / "ducky_coco"
    assert main(["convert-dataset", "--from", "boxes-json", "--annotations",
                 str(DUCKY / "boxes.json"), "--images", str(DUCKY / "train"), "--class-name",
                 "rubber ducky", "--to", "coco", "--out", str(out), "--no-progress"]) == 0
    assert "wrote 5 images, 5 boxes" in capsys.readouterr().out
    coco = json.loads((out / "annotations.json").read_text())
    assert coco["categories"] == [{"id": 1, "name": "rubber ducky"}]
    assert len(coco["images"]) == 5 and len(coco["annotations"]) == 5
