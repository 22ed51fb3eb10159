"""Reading a workdir that is being trained: predict and eval take no lock and read its newest
complete checkpoint."""

import json

import pytest

from jaxdet.cli.main import main
from jaxdet.train.workdir_lock import hold_workdir

pytestmark = pytest.mark.xdist_group("predict")


def test_predict_and_eval_read_a_workdir_while_it_is_trained(trained, tmp_path):
    image = next((trained / "data" / "eval" / "images").iterdir())
    with hold_workdir(trained):  # as a training run holds it
        assert main(["predict", "--workdir", str(trained), str(image),
                     "--out", str(tmp_path / "pred")]) == 0
        assert main(["eval", "--workdir", str(trained), "--out", str(tmp_path / "eval")]) == 0
    summary = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    assert summary["num_images"] == 1 and summary["checkpoint_step"] == 6
    assert "AP" in json.loads((tmp_path / "eval" / "metrics.json").read_text())
