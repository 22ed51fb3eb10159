"""A TF2 zoo model as downloaded (pipeline.config + checkpoint/ckpt-0), through the command
line: predict gives TF's detections in image pixels with COCO's names, eval writes beside the
checkpoint, --workdir takes the zoo folder itself, and convert-checkpoint makes a workdir that
every workdir command uses."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxdet
from jaxdet.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

MOBILENET = FIXTURES / "tf_ssd_mobilenet_v2_320x320_coco17_tpu-8"
SETS = ["--set", "data.train.input_path=unused", "--set", "data.eval.input_path=unused"]

pytestmark = pytest.mark.xdist_group("tf_detectors")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """A zoo download's layout: model/pipeline.config, model/checkpoint/ckpt-0.*"""
    root = tmp_path_factory.mktemp("zoo") / "ssd_mobilenet_v2_320x320_coco17_tpu-8"
    rebuild_data(MOBILENET, root / "checkpoint" / "ckpt-0")
    shutil.copy(MOBILENET / "pipeline.config", root / "pipeline.config")
    (root / "photos").mkdir()
    shutil.copy(MOBILENET / "input.png", root / "photos" / "test.png")
    return root


def _tf_detections():
    tf = np.load(MOBILENET / "outputs.npz")
    n = int(tf["num_detections"])
    return tf["detection_classes"][:n].astype(int), tf["detection_scores"][:n], \
        tf["detection_boxes"][:n]


def _check_equals_tf(entry: dict) -> None:
    classes, scores, boxes = _tf_detections()
    dets = entry["detections"]
    assert len(dets) == len(classes) and entry["width"] == entry["height"] == 300
    # TF's 0-based class k is COCO id k + 1; boxes normalized yxyx -> pixel xyxy
    got = sorted((d["class_id"], round(d["score"], 3)) for d in dets)
    want = sorted((int(c) + 1, round(float(s), 3)) for c, s in zip(classes, scores, strict=True))
    assert got == want
    best = dets[0]
    y0, x0, y1, x1 = boxes[0] * 300
    assert best["class_id"] == classes[0] + 1
    np.testing.assert_allclose(best["box_xyxy"], [x0, y0, x1, y1], atol=0.3)


def test_predict_with_a_zoo_checkpoint(zoo, tmp_path, capsys):
    out = tmp_path / "preds"
    code = main(["predict", "--pipeline-config", str(zoo / "pipeline.config"), "--checkpoint",
                 str(zoo / "checkpoint" / "ckpt-0"), str(zoo / "photos"), "--out", str(out),
                 "--draw-threshold", "0.8", *SETS])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "predictions.json").read_text())
    assert summary["checkpoint"].endswith("ckpt-0") and summary["workdir"] is None
    names = {c["id"]: c["name"] for c in summary["classes"]}
    assert names[1] == "person" and names[90] == "toothbrush" and len(names) == 90
    entry = json.loads((out / "test.json").read_text())
    _check_equals_tf(entry)
    assert all(d["class_name"] == names[d["class_id"]] for d in entry["detections"])
    assert (out / "test.jpg").is_file()


def test_workdir_takes_a_zoo_folder_as_jaxdet_load_does(zoo, tmp_path, capsys):
    """--workdir takes the zoo folder as downloaded, as jaxdet.load does: the command's
    detections are the Python API's on the same photo; eval reads the pipeline.config's eval
    input (the placeholder path named in one line) and, given data, writes where asked."""
    photo = zoo / "photos" / "test.png"
    out = tmp_path / "preds"
    code = main(["predict", "--workdir", str(zoo), str(photo), "--out", str(out),
                 "--batch-size", "1"])
    assert code == 0, capsys.readouterr().err
    entry = json.loads((out / "test.json").read_text())
    _check_equals_tf(entry)
    detector = jaxdet.load(zoo)
    assert repr(detector) == ("Detector(ssd, 90 classes, input 300x300, weights: checkpoint "
                              f"{zoo / 'checkpoint' / 'ckpt-0'})")
    assert detector.predict(photo).to_dict() == entry
    capsys.readouterr()
    assert main(["eval", "--workdir", str(zoo)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("config error: data.eval.input_path is still the TF OD API "
                          "placeholder 'PATH_TO_BE_CONFIGURED/val2017"), err
    code = main(["eval", "--workdir", str(zoo), "--out", str(tmp_path / "eval"), "--set",
                 "data.eval={type: shapes, output_dir: shapes_eval, num_images: 4, "
                 "image_size: [300, 300]}", "--set", "eval.batch_size=4",
                 "--set", "parallel.data=1", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert "AP" in json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert main(["predict", "--workdir", str(zoo), str(photo), "--out", str(out),
                 "--step", "3"]) == 2
    assert "--step picks a checkpoint of --workdir" in capsys.readouterr().err


def test_convert_checkpoint_then_workdir_commands(zoo, tmp_path, capsys):
    workdir = tmp_path / "imported"
    code = main(["convert-checkpoint", "--pipeline-config", str(zoo / "pipeline.config"),
                 "--checkpoint", str(zoo / "checkpoint"), "--workdir", str(workdir), *SETS])
    assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "restored 324 tensors, 0 re-initialised, 0 unused" in printed
    assert (workdir / "config.yaml").is_file() and (workdir / "checkpoints" / "0").is_dir()
    out = tmp_path / "preds"
    assert main(["predict", "--workdir", str(workdir), str(zoo / "photos"), "--out",
                 str(out)]) == 0
    _check_equals_tf(json.loads((out / "test.json").read_text()))
    # a second import into the same workdir is refused, nothing overwritten
    assert main(["convert-checkpoint", "--pipeline-config", str(zoo / "pipeline.config"),
                 "--checkpoint", str(zoo / "checkpoint"), "--workdir", str(workdir),
                 *SETS]) == 1
    assert "already holds checkpoints" in capsys.readouterr().err


def test_eval_with_a_zoo_checkpoint_writes_beside_it(zoo, capsys):
    code = main(["eval", "--pipeline-config", str(zoo / "pipeline.config"), "--checkpoint",
                 str(zoo / "checkpoint" / "ckpt-0"), *SETS,
                 "--set", "data.eval={type: shapes, output_dir: shapes_eval, num_images: 4, "
                          "image_size: [300, 300]}", "--set", "eval.batch_size=4",
                 "--set", "parallel.data=1"])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((zoo / "eval" / "ckpt-0" / "metrics.json").read_text())
    assert "AP" in metrics
    assert f"wrote {zoo / 'eval' / 'ckpt-0' / 'detections.json'}" in capsys.readouterr().out


def test_checkpoint_arguments_are_checked(zoo, capsys):
    assert main(["predict", "--pipeline-config", str(zoo / "pipeline.config"),
                 str(zoo / "photos"), "--out", "x", *SETS]) == 2
    assert "give --workdir" in capsys.readouterr().err
    assert main(["eval", "--pipeline-config", str(zoo / "pipeline.config"), "--checkpoint",
                 str(zoo / "checkpoint"), "--step", "3", *SETS]) == 2
    assert "--step picks a checkpoint of --workdir" in capsys.readouterr().err


def test_verbose_import_names_every_tensor_it_counts(zoo, caplog):
    """-v names each tensor the one-line import report counts (restored, re-initialised,
    unused), so an unused one can be found."""
    import logging
    import re

    from jaxdet.config.tfod import load_pipeline_config
    from jaxdet.jobs import runs

    config = load_pipeline_config(zoo / "pipeline.config", SETS[1::2])
    with caplog.at_level(logging.DEBUG, logger="jaxdet"):
        _, _, label = runs.load_for_inference(config, checkpoint=zoo / "checkpoint" / "ckpt-0")
    assert label == "ckpt-0"  # a zoo checkpoint saved without a training step
    messages = [r.message for r in caplog.records]
    summary = [m for m in messages if m.startswith("init weights: ")]
    assert len(summary) == 1
    counts = re.search(r"restored (\d+) tensors, (\d+) re-initialised, (\d+) unused", summary[0])
    for title, count in zip(("restored", "re-initialised", "unused"), counts.groups(),
                            strict=True):
        named = [m for m in messages if m.startswith(f"init weights {title}: ")]
        assert len(named) == int(count), title
    assert int(counts[1]) > 300
