"""Data sources read from a bucket (the GCS emulator of tests/gcs_emulator.py) give what the
same files give on local disk: TFRecord shards by glob, label maps, the images' byte ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jaxdet.data.decode import load_record_image
from jaxdet.data.tfrecord import encode_example, write_tfrecord
from jaxdet.data.tfrecord_source import TfRecordSource
from random_arrays import jpeg_bytes

LABEL_MAP = "item { id: 1 name: 'cat' }\nitem { id: 2 name: 'dog' }\n"


def _example(seed: int) -> bytes:
    height, width = 48 + 8 * seed, 64
    return encode_example({
        "image/encoded": [jpeg_bytes(height, width, seed)], "image/format": ["jpeg"],
        "image/height": [height], "image/width": [width], "image/source_id": [str(seed)],
        "image/object/bbox/ymin": [0.1], "image/object/bbox/xmin": [0.2],
        "image/object/bbox/ymax": [0.6], "image/object/bbox/xmax": [0.9],
        "image/object/class/label": [1 + seed % 2]})


def test_tfrecord_shards_and_label_map_from_a_bucket_equal_local_ones(tmp_path, gcs):
    folder = tmp_path / "coco"
    folder.mkdir()
    for shard in range(2):
        write_tfrecord(folder / f"train.record-{shard:05d}-of-00002",
                       [_example(3 * shard + i) for i in range(3)])
    (folder / "label_map.pbtxt").write_text(LABEL_MAP)
    bucket = gcs.upload(folder, "sources/coco")

    local = TfRecordSource(str(folder / "train.record-?????-of-00002"),
                           folder / "label_map.pbtxt")
    remote = TfRecordSource(f"{bucket}/train.record-?????-of-00002",
                            f"{bucket}/label_map.pbtxt")
    assert remote.files == [f"{bucket}/train.record-{s:05d}-of-00002" for s in range(2)]
    assert len(remote) == len(local) == 6
    assert remote.category_names == local.category_names == ["cat", "dog"]
    for i in range(len(local)):
        want, got = local[i], remote[i]
        np.testing.assert_array_equal(got["boxes"], want["boxes"])
        np.testing.assert_array_equal(got["classes"], want["classes"])
        assert got["image_bytes_ref"][1:] == want["image_bytes_ref"][1:]
        np.testing.assert_array_equal(load_record_image(got), load_record_image(want))


@pytest.mark.slow
@pytest.mark.xdist_group("e2e")
def test_training_on_bucket_records_equals_training_on_local_ones(tmp_path, gcs,
                                                                  tiny_overrides):
    """Two steps of the tiny model on TFRecords and a label map in the bucket reach the same
    parameters and the same evaluation as on the same files on local disk."""
    import jax

    from jaxdet.config.loader import load_config
    from jaxdet.jobs import runs

    folder = tmp_path / "data"
    folder.mkdir()
    write_tfrecord(folder / "train.record-00000-of-00001", [_example(i) for i in range(6)])
    (folder / "label_map.pbtxt").write_text(LABEL_MAP)
    bucket = gcs.upload(folder, "sources/train")
    kept = [o for o in tiny_overrides if not o.startswith(("data.train.", "data.eval."))]

    def run(root: str, workdir):
        dataset = (f"{{type: tfrecord, input_path: '{root}/train.record-?????-of-00001', "
                   f"label_map_path: '{root}/label_map.pbtxt'}}")
        config = load_config("shapes_demo", kept + [
            f"data.train={dataset}", f"data.eval={dataset}", "model.num_classes=2",
            "train.num_steps=2", "train.checkpoint_every=2", "eval.num_visualizations=0",
            "data.max_number_of_boxes=4"])
        return runs.train(config, workdir, progress=False)

    remote, local = run(bucket, tmp_path / "remote"), run(str(folder), tmp_path / "local")
    assert remote.step == local.step == 2
    jax.tree.map(np.testing.assert_array_equal, remote.state, local.state)
    metrics = [(w / "eval" / "step_2" / "metrics.json").read_text()
               for w in (tmp_path / "remote", tmp_path / "local")]
    assert metrics[0] == metrics[1]


def test_a_coco_json_and_image_folder_in_a_bucket_equal_local_ones(tmp_path, gcs):
    from jaxdet.data.coco import CocoSource
    from jaxdet.data.shapes import generate_shapes

    annotations = generate_shapes(tmp_path / "shapes", 4, image_size=(48, 72), seed=3,
                                  num_classes=2)
    bucket = gcs.upload(tmp_path / "shapes", "sources/shapes")
    local = CocoSource(annotations, tmp_path / "shapes" / "images")
    remote = CocoSource(f"{bucket}/{annotations.name}", f"{bucket}/images")
    assert len(remote) == len(local) == 4
    for i in range(4):
        assert remote[i]["image_path"] == f"{bucket}/images/{Path(local[i]['image_path']).name}"
        np.testing.assert_array_equal(remote[i]["boxes"], local[i]["boxes"])
        np.testing.assert_array_equal(load_record_image(remote[i]), load_record_image(local[i]))


def test_voc_in_a_bucket_converts_to_tfrecord_shards_in_the_bucket(tmp_path, gcs):
    """``jaxdet convert-dataset --from voc`` with the annotations and images in the bucket and
    ``--out`` / ``--label-map-out`` there too: the shards read back as the same records as
    the VOC source read from local disk."""
    from jaxdet.cli.main import main
    from jaxdet.data.shapes import generate_shapes
    from jaxdet.data.voc import VocSource

    ann = generate_shapes(tmp_path / "shapes", 4, image_size=(48, 64), seed=5, num_classes=2)
    data = __import__("json").loads(Path(ann).read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    (tmp_path / "voc" / "Annotations").mkdir(parents=True)
    for image in data["images"]:
        objects = "".join(
            f"<object><name>{names[a['category_id']]}</name><bndbox><xmin>{a['bbox'][0] + 1}"
            f"</xmin><ymin>{a['bbox'][1] + 1}</ymin><xmax>{a['bbox'][0] + a['bbox'][2]}</xmax>"
            f"<ymax>{a['bbox'][1] + a['bbox'][3]}</ymax></bndbox></object>"
            for a in data["annotations"] if a["image_id"] == image["id"])
        (tmp_path / "voc" / "Annotations" / f"{Path(image['file_name']).stem}.xml").write_text(
            f"<annotation><filename>{image['file_name']}</filename>{objects}</annotation>")
    bucket = gcs.upload(tmp_path / "voc", "voc")
    images = gcs.upload(Path(ann).parent / "images", "voc/JPEGImages")

    assert main(["convert-dataset", "--from", "voc", "--annotations", f"{bucket}/Annotations",
                 "--images", images, "--to", "tfrecord", "--out", f"{bucket}/train.tfrecord",
                 "--shards", "2", "--label-map-out", f"{bucket}/label_map.pbtxt",
                 "--no-progress"]) == 0
    local = VocSource(tmp_path / "voc" / "Annotations", Path(ann).parent / "images")
    back = TfRecordSource(f"{bucket}/train.tfrecord-?????-of-00002",
                          f"{bucket}/label_map.pbtxt")
    assert len(back) == len(local) == 4 and back.category_names == local.category_names
    # record k went to shard k % 2; the source reads shard 0, then shard 1
    for got, k in zip((back[i] for i in range(4)), (0, 2, 1, 3), strict=True):
        want = local[k]
        np.testing.assert_allclose(got["boxes"], want["boxes"], atol=1e-3)
        assert got["classes"].tolist() == want["classes"].tolist()
        np.testing.assert_array_equal(load_record_image(got), load_record_image(want))


def test_coco_output_and_preview_written_into_a_bucket_equal_local_ones(tmp_path, gcs, capsys):
    """``jaxdet convert-dataset --to coco --out gs://... --preview gs://...png``: the same
    annotations, images and picture as written to local disk."""
    from jaxdet import files
    from jaxdet.cli.main import main
    from jaxdet.data.shapes import generate_shapes

    ann = generate_shapes(tmp_path / "shapes", 3, image_size=(40, 56), seed=7, num_classes=2)
    bucket = f"gs://{gcs.bucket}/coco_out"
    for out, preview in ((bucket, f"{bucket}/preview.png"),
                         (str(tmp_path / "local"), str(tmp_path / "local" / "preview.png"))):
        assert main(["convert-dataset", "--from", "coco", "--annotations", str(ann),
                     "--images", str(Path(ann).parent / "images"), "--to", "coco", "--out",
                     out, "--preview", preview, "--no-progress"]) == 0
        assert f"preview: {preview}" in capsys.readouterr().out
    local = tmp_path / "local"
    assert (files.read_text(f"{bucket}/annotations.json")
            == (local / "annotations.json").read_text())
    for image in sorted((local / "images").iterdir()):
        assert files.read_bytes(f"{bucket}/images/{image.name}") == image.read_bytes()
    assert files.read_bytes(f"{bucket}/preview.png") == (local / "preview.png").read_bytes()
