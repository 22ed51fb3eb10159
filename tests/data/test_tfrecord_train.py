"""Train a few steps and evaluate on the TF OD API pets TFRecord (tiny model, 64x64)."""

import json
from pathlib import Path

import pytest

from jaxdet.config.loader import load_config
from jaxdet.jobs import runs

TFOD = Path(__file__).resolve().parents[3] / "shared" / "data" / "tfod"
PETS = TFOD / "pets_examples.record"
PET_MAP = TFOD / "label_maps" / "pet_label_map.pbtxt"

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e"),
              pytest.mark.skipif(not PETS.is_file(), reason="../shared/data not present")]


def test_train_and_eval_on_pets_tfrecord(tiny_overrides, tmp_path):
    dataset = f"{{type: tfrecord, input_path: '{PETS}', label_map_path: '{PET_MAP}'}}"
    overrides = [o for o in tiny_overrides if not o.startswith(("data.train.", "data.eval."))]
    config = load_config("shapes_demo", overrides + [
        f"data.train={dataset}", f"data.eval={dataset}", "model.num_classes=37",
        "train.num_steps=2", "train.checkpoint_every=2", "eval.num_visualizations=2",
        "data.max_number_of_boxes=4"])
    result = runs.train(config, tmp_path, progress=False)
    assert result.step == 2
    metrics = json.loads((tmp_path / "eval" / "step_2" / "metrics.json").read_text())
    assert metrics["num_images"] == 10
    assert 0.0 <= metrics["AP"] <= 1.0
    assert (tmp_path / "eval" / "step_2" / "samples.png").is_file()  # images read from records
    detections = json.loads((tmp_path / "eval" / "step_2" / "detections.json").read_text())
    assert {d["image_id"] for d in detections} <= set(range(1, 11))
    assert all(1 <= d["category_id"] <= 37 for d in detections)
