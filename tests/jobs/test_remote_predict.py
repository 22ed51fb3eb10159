"""``jaxdet predict`` with everything in a bucket (the GCS emulator of tests/gcs_emulator.py):
a TF OD API model folder (pipeline.config + checkpoint/ckpt-0) and a folder of JPEG photos in
GCS give the same detections as the same files on local disk."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from jaxdet.jobs.model_source import model_source
from jaxdet.jobs.predict import predict_images

FIXTURES = Path(__file__).parents[1] / "interop" / "fixtures"
FIXTURE = FIXTURES / "tf_ssd_mobilenet_v2_320x320_coco17_tpu-8"
PHOTOS = Path(__file__).parents[1] / "data" / "fixtures" / "jpeg"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

pytestmark = pytest.mark.xdist_group("tf_detectors")


def test_a_zoo_model_and_photos_in_a_bucket_detect_as_on_disk(tmp_path, gcs):
    zoo = tmp_path / "zoo"
    (zoo / "checkpoint").mkdir(parents=True)
    shutil.copy(FIXTURE / "pipeline.config", zoo / "pipeline.config")
    rebuild_data(FIXTURE, zoo / "checkpoint" / "ckpt-0")
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("photo_420_q90.jpg", "photo_portrait_420.jpg"):
        shutil.copy(PHOTOS / name, photos / name)
    model_url = gcs.upload(zoo, "predict/zoo")
    photos_url = gcs.upload(photos, "predict/photos")

    results = {}
    for where, model, inputs in (("local", zoo, photos), ("gcs", model_url, photos_url)):
        source = model_source(model)
        assert str(source.checkpoint).endswith("checkpoint/ckpt-0")
        out = tmp_path / f"out_{where}"
        predict_images(source.config, None, [inputs], out, checkpoint=source.checkpoint,
                       batch_size=1, progress=False)
        results[where] = json.loads((out / "predictions.json").read_text())["images"]
    local, remote = results["local"], results["gcs"]
    assert [Path(e["image"]).name for e in remote] == [Path(e["image"]).name for e in local]
    assert remote[0]["image"].startswith(photos_url)
    for a, b in zip(remote, local, strict=True):
        assert a["detections"] == b["detections"] and len(a["detections"]) > 0
