"""``s3://`` through the same file layer as ``gs://``, on an S3 emulator (moto's server,
tests/s3_emulator.py): the file functions, TFRecord shards and a label map read as on local
disk, and a run whose data and workdir are in the bucket trains to the parameters of the same
run on local disk and serves ``jaxdet predict`` into the bucket."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxdet import files
from jaxdet.data.decode import load_record_image
from jaxdet.data.tfrecord import encode_example, write_tfrecord
from jaxdet.data.tfrecord_source import TfRecordSource
from random_arrays import jpeg_bytes

LABEL_MAP = "item { id: 1 name: 'cat' }\nitem { id: 2 name: 'dog' }\n"


def _examples(count: int) -> list[bytes]:
    out = []
    for seed in range(count):
        height, width = 40 + 8 * seed, 56
        out.append(encode_example({
            "image/encoded": [jpeg_bytes(height, width, seed)], "image/format": ["jpeg"],
            "image/height": [height], "image/width": [width], "image/source_id": [str(seed)],
            "image/object/bbox/ymin": [0.1], "image/object/bbox/xmin": [0.2],
            "image/object/bbox/ymax": [0.6], "image/object/bbox/xmax": [0.9],
            "image/object/class/label": [1 + seed % 2]}))
    return out


@pytest.fixture(scope="module")
def data(s3, tmp_path_factory):
    folder = tmp_path_factory.mktemp("s3data")
    write_tfrecord(folder / "train.record-00000-of-00001", _examples(6))
    (folder / "label_map.pbtxt").write_text(LABEL_MAP)
    return folder, s3.upload(folder, "data")


def test_the_file_functions_on_s3(s3):
    root = f"s3://{s3.bucket}/files"
    files.write_bytes(f"{root}/a/one.bin", bytes(range(256)))
    files.write_text(f"{root}/a/two.txt", "two")
    assert files.read_range(f"{root}/a/one.bin", 10, 4) == bytes([10, 11, 12, 13])
    assert files.glob(f"{root}/a/*", files_only=True) == [f"{root}/a/one.bin",
                                                           f"{root}/a/two.txt"]
    assert files.isdir(f"{root}/a") and files.getsize(f"{root}/a/one.bin") == 256
    with pytest.raises(FileNotFoundError, match=f"{root}/a/absent"):
        files.read_bytes(f"{root}/a/absent")


def test_tfrecord_shards_and_label_map_on_s3_equal_local_ones(data):
    local, remote = data
    mine = TfRecordSource(f"{remote}/train.record-?????-of-00001", f"{remote}/label_map.pbtxt")
    theirs = TfRecordSource(local / "train.record-?????-of-00001", local / "label_map.pbtxt")
    assert len(mine) == len(theirs) == 6 and mine.category_names == theirs.category_names
    for i in range(6):
        np.testing.assert_array_equal(mine[i]["boxes"], theirs[i]["boxes"])
        np.testing.assert_array_equal(load_record_image(mine[i]), load_record_image(theirs[i]))


@pytest.mark.slow
@pytest.mark.xdist_group("e2e")
def test_a_run_with_data_and_workdir_on_s3_equals_a_local_one(s3, data, tiny_overrides,
                                                               tmp_path, monkeypatch):
    from jaxdet.cli.main import main
    from jaxdet.config.loader import load_config
    from jaxdet.jobs import runs

    monkeypatch.setenv("JAXDET_STAGING_DIR", str(tmp_path / "staging"))
    local, remote = data
    kept = [o for o in tiny_overrides if not o.startswith(("data.train.", "data.eval."))]

    def config(root: str):
        dataset = (f"{{type: tfrecord, input_path: '{root}/train.record-?????-of-00001', "
                   f"label_map_path: '{root}/label_map.pbtxt'}}")
        return load_config("shapes_demo", kept + [
            f"data.train={dataset}", f"data.eval={dataset}", "model.num_classes=2",
            "train.num_steps=2", "train.checkpoint_every=2", "eval.num_visualizations=0",
            "data.max_number_of_boxes=4"])

    workdir = f"s3://{s3.bucket}/runs/tiny"
    in_bucket = runs.train(config(remote), workdir, progress=False)
    on_disk = runs.train(config(str(local)), tmp_path / "local", progress=False)
    jax.tree.map(np.testing.assert_array_equal, in_bucket.state, on_disk.state)
    assert (files.read_text(f"{workdir}/eval/step_2/metrics.json")
            == (tmp_path / "local" / "eval" / "step_2" / "metrics.json").read_text())

    files.write_bytes(f"s3://{s3.bucket}/photos/a.jpg", jpeg_bytes(60, 80, 9))
    assert main(["predict", "--workdir", workdir, f"s3://{s3.bucket}/photos", "--out",
                 f"s3://{s3.bucket}/predicted", "--no-progress"]) == 0
    predicted = json.loads(files.read_text(f"s3://{s3.bucket}/predicted/predictions.json"))
    assert predicted["num_images"] == 1
    assert predicted["images"][0]["image"] == f"s3://{s3.bucket}/photos/a.jpg"
