"""jaxdet convert-dataset: COCO / VOC -> TFRecord -> COCO round trips, bad images, the grid."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxdet.cli.main import main
from jaxdet.config.label_map import read_label_map
from jaxdet.data.coco import CocoSource
from jaxdet.data.tfrecord import iter_tfrecord, parse_example
from jaxdet.data.tfrecord_source import TfRecordSource
from jaxdet.data.voc import VocSource
from jaxdet.jobs.convert_dataset import (
    draw_dataset_grid,
    record_image_bytes,
    shard_paths,
    source_to_coco,
    source_to_tfrecord,
)

TFOD = Path(__file__).resolve().parents[3] / "shared" / "data" / "tfod"


def _by_id(source):
    return {source[i]["image_id"]: source[i] for i in range(len(source))}


def test_coco_to_tfrecord_to_coco_round_trip(shapes_dir, tmp_path):
    coco = CocoSource(shapes_dir / "annotations.json", shapes_dir / "images")
    out = tmp_path / "shapes.tfrecord"
    summary = source_to_tfrecord(coco, out, shards=2, label_map_out=tmp_path / "map.pbtxt",
                                 progress=False)
    assert summary.num_images == 12 and not summary.skipped
    assert summary.outputs == shard_paths(out, 2) == [
        f"{out}-00000-of-00002", f"{out}-00001-of-00002"]
    assert read_label_map(tmp_path / "map.pbtxt") == {1: "circle", 2: "square", 3: "triangle"}
    ex = parse_example(next(iter_tfrecord(summary.outputs[0]))[1])
    assert ex["image/format"] == [b"jpeg"] and ex["image/source_id"] == [b"1"]
    assert ex["image/object/class/text"][0].decode() in ("circle", "square", "triangle")

    back = TfRecordSource(f"{out}-*-of-00002", tmp_path / "map.pbtxt")
    assert len(back) == 12 and back.skips.total == 0
    assert back.category_names == coco.category_names
    coco_dir = tmp_path / "coco"
    summary = source_to_coco(back, coco_dir, progress=False)
    assert summary.num_images == 12
    again = CocoSource(coco_dir / "annotations.json", coco_dir / "images")
    assert again.category_names == coco.category_names
    assert again.category_ids == coco.category_ids
    originals, round_tripped = _by_id(coco), _by_id(again)
    assert sorted(originals) == sorted(round_tripped)
    for image_id, a in originals.items():
        b = round_tripped[image_id]
        assert Path(a["image_path"]).read_bytes() == Path(b["image_path"]).read_bytes()
        assert Path(a["image_path"]).name == Path(b["image_path"]).name
        assert (a["height"], a["width"]) == (b["height"], b["width"])
        np.testing.assert_allclose(a["boxes"], b["boxes"], atol=1e-3)
        assert a["classes"].tolist() == b["classes"].tolist()
        assert a["is_crowd"].tolist() == b["is_crowd"].tolist()


def _write_voc(shapes_dir, voc_dir):
    """The shapes data set as VOC XML (1-based inclusive corners; object 0 difficult)."""
    data = json.loads((shapes_dir / "annotations.json").read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    (voc_dir / "Annotations").mkdir(parents=True)
    for image in data["images"][:5]:
        objects = ""
        anns = [a for a in data["annotations"] if a["image_id"] == image["id"]]
        for k, a in enumerate(anns):
            x, y, w, h = a["bbox"]
            objects += (f"<object><name>{names[a['category_id']]}</name>"
                        f"<difficult>{int(k == 0)}</difficult><bndbox><xmin>{x + 1}</xmin>"
                        f"<ymin>{y + 1}</ymin><xmax>{x + w}</xmax><ymax>{y + h}</ymax>"
                        "</bndbox></object>")
        xml = (f"<annotation><filename>{image['file_name']}</filename><size>"
               f"<width>{image['width']}</width><height>{image['height']}</height>"
               f"<depth>3</depth></size>{objects}</annotation>")
        (voc_dir / "Annotations" / f"{Path(image['file_name']).stem}.xml").write_text(xml)


def test_voc_to_tfrecord(shapes_dir, tmp_path):
    _write_voc(shapes_dir, tmp_path / "voc")
    voc = VocSource(tmp_path / "voc" / "Annotations", shapes_dir / "images")
    summary = source_to_tfrecord(voc, tmp_path / "voc.tfrecord",
                                 crowd_key="image/object/difficult", progress=False)
    assert summary.num_images == 5
    back = TfRecordSource(tmp_path / "voc.tfrecord")
    assert back.num_classes == len(voc.category_names)  # largest label found
    for i in range(5):
        a, b = voc[i], back[i]
        np.testing.assert_allclose(a["boxes"], b["boxes"], atol=1e-3)
        assert a["classes"].tolist() == b["classes"].tolist()
        assert b["is_crowd"].tolist() == a["is_crowd"].tolist()
        assert b["is_crowd"][0] and b["image_id"] == a["image_id"]
        assert Path(a["image_path"]).read_bytes() == record_image_bytes(b)
    ex = parse_example(next(iter_tfrecord(tmp_path / "voc.tfrecord"))[1])
    assert ex["image/object/difficult"][0] == 1


def test_cli_coco_to_tfrecord_names_unreadable_images(shapes_dir, tmp_path, capsys):
    data = json.loads((shapes_dir / "annotations.json").read_text())
    images = tmp_path / "images"
    shutil.copytree(shapes_dir / "images", images)
    (images / data["images"][1]["file_name"]).unlink()
    (images / data["images"][2]["file_name"]).write_bytes(b"garbage")
    out = tmp_path / "out.tfrecord"
    rc = main(["convert-dataset", "--from", "coco", "--annotations",
               str(shapes_dir / "annotations.json"), "--images", str(images), "--to", "tfrecord",
               "--out", str(out), "--label-map-out", str(tmp_path / "m.pbtxt"),
               "--no-progress", "--preview", str(tmp_path / "preview.png")])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "wrote 10 images" in printed and "skipped 2 unreadable images" in printed
    assert data["images"][1]["file_name"] in printed and data["images"][2]["file_name"] in printed
    assert len(list(iter_tfrecord(out))) == 10
    assert Image.open(tmp_path / "preview.png").size[0] > 100

    rc = main(["convert-dataset", "--from", "tfrecord", "--input", str(out), "--to", "coco",
               "--out", str(tmp_path / "back"), "--no-progress"])
    assert rc == 0 and "wrote 10 images" in capsys.readouterr().out
    assert len(json.loads((tmp_path / "back" / "annotations.json").read_text())["images"]) == 10


def test_cli_usage_errors(tmp_path, capsys):
    assert main(["convert-dataset", "--from", "coco", "--to", "tfrecord",
                 "--out", str(tmp_path / "x")]) == 1
    assert "needs --annotations and --images" in capsys.readouterr().err
    assert main(["convert-dataset", "--from", "tfrecord", "--input", str(tmp_path / "no-*"),
                 "--to", "coco", "--out", str(tmp_path / "y")]) == 1
    assert "no TFRecord file matches" in capsys.readouterr().err


def test_dataset_grid(shapes_dir, tmp_path):
    coco = CocoSource(shapes_dir / "annotations.json", shapes_dir / "images")
    out = draw_dataset_grid(coco, tmp_path / "grid.png", 7, columns=4, cell_size=64)
    image = Image.open(out)
    # 2 rows of 4 cells of 64 px, 4 px gaps, title bands above each row
    assert image.size[0] == 4 * 64 + 5 * 4
    assert image.size[1] > 2 * 64 + 3 * 4


@pytest.mark.skipif(not (TFOD / "pets_examples.record").is_file(),
                    reason="../shared/data not present")
def test_pets_grid(tmp_path):
    pets = TfRecordSource(TFOD / "pets_examples.record",
                          TFOD / "label_maps" / "pet_label_map.pbtxt")
    out = draw_dataset_grid(pets, tmp_path / "pets.png", 10, columns=5, cell_size=96)
    assert Image.open(out).size[0] == 5 * 96 + 6 * 4


def test_cli_carries_masks_coco_to_tfrecord_to_coco(tmp_path, capsys):
    """``--masks``: generated shapes' exact masks (COCO RLE) -> TFRecord PNG masks -> COCO,
    each step reading back the same masks."""
    from jaxdet.data.masks import load_record_masks
    from jaxdet.data.shapes import generate_shapes

    generate_shapes(tmp_path / "shapes", 4, image_size=(48, 64), seed=3, masks=True,
                    image_format="png")
    src = tmp_path / "shapes"
    record = str(tmp_path / "masks.tfrecord")
    assert main(["convert-dataset", "--from", "coco", "--to", "tfrecord", "--annotations",
                 str(src / "annotations.json"), "--images", str(src / "images"), "--out",
                 record, "--label-map-out", str(tmp_path / "map.pbtxt"), "--masks",
                 "--no-progress"]) == 0
    assert main(["convert-dataset", "--from", "tfrecord", "--to", "coco", "--input", record,
                 "--label-map", str(tmp_path / "map.pbtxt"), "--out", str(tmp_path / "back"),
                 "--masks", "--no-progress"]) == 0
    sources = [CocoSource(src / "annotations.json", src / "images", masks=True),
               TfRecordSource(record, tmp_path / "map.pbtxt", masks=True),
               CocoSource(tmp_path / "back" / "annotations.json", tmp_path / "back" / "images",
                          masks=True)]
    first, *others = [_by_id(s) for s in sources]
    assert sum(len(r["boxes"]) for r in first.values()) > 4
    for image_id, record_a in first.items():
        want = load_record_masks(record_a)
        assert want.shape == (len(record_a["boxes"]), 48, 64) and want.any()
        for other in others:
            np.testing.assert_array_equal(load_record_masks(other[image_id]), want)
    capsys.readouterr()
    assert main(["convert-dataset", "--from", "boxes-json", "--to", "coco", "--annotations",
                 "x.json", "--images", "imgs", "--out", str(tmp_path / "no"), "--masks"]) == 1
    assert "boxes-json annotations have no masks" in capsys.readouterr().err
