"""A TF OD API user's path: a pipeline.config and TFRecord files, straight into
``jaxdet train | eval | summary --pipeline-config`` and ``jaxdet convert-config``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jaxdet.cli.main import main
from jaxdet.config.loader import load_config
from jaxdet.config.tfod import load_pipeline_config
from tfod_pipeline import write_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]

TFOD_CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """Generated shapes written as TFRecord (train in 2 shards) + label map + pipeline.config."""
    return write_pipeline(tmp_path_factory.mktemp("tfod"))


def test_train_eval_summary_from_a_pipeline_config(pipeline, tmp_path, capsys):
    workdir = tmp_path / "run"
    # the config's fine_tune_checkpoint is still the placeholder: named, nothing written
    assert main(["train", "--pipeline-config", str(pipeline), "--workdir", str(workdir),
                 "--set", "parallel.data=1"]) == 2
    assert "train.init_checkpoint.path is still the TF OD API placeholder" in (
        capsys.readouterr().err)
    assert not workdir.exists()
    sets = ["parallel.data=1", "train.init_checkpoint=null"]  # train from scratch
    assert main(["train", "--pipeline-config", str(pipeline), "--workdir", str(workdir),
                 *[a for s in sets for a in ("--set", s)]]) == 0
    assert "trained 3 steps" in capsys.readouterr().out
    metrics = json.loads((workdir / "eval" / "step_3" / "metrics.json").read_text())
    assert metrics["num_images"] == 6
    assert "AP" in metrics and "PascalBoxes_Precision/mAP@0.5IOU" in metrics
    assert (workdir / "eval" / "step_3" / "samples.png").is_file()
    # the workdir's config.yaml is the converted config: eval needs no pipeline.config
    saved = load_config(workdir / "config.yaml")
    assert saved == load_pipeline_config(pipeline, sets)
    assert main(["eval", "--workdir", str(workdir), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert again["AP"] == pytest.approx(metrics["AP"])
    assert "Pascal VOC mAP@0.5" in capsys.readouterr().out
    assert main(["eval", "--pipeline-config", str(pipeline), "--workdir", str(workdir),
                 "--out", str(tmp_path / "third")]) == 0
    third = json.loads((tmp_path / "third" / "metrics.json").read_text())
    assert third["PascalBoxes_Precision/mAP@0.5IOU"] == pytest.approx(
        metrics["PascalBoxes_Precision/mAP@0.5IOU"], nan_ok=True)
    capsys.readouterr()

    assert main(["summary", "--pipeline-config", str(pipeline), "--json", "--no-flops",
                 "--set", "model.num_classes=5"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["input_size"] == [64, 64]
    assert summary["anchors"]["total"] == 6 * (8 * 8 + 4 * 4 + 2 * 2)
    assert summary["num_classes"] == 5


def test_convert_config_writes_yaml_that_trains_the_same_model(pipeline, tmp_path, capsys):
    out = tmp_path / "converted.yaml"
    assert main(["convert-config", str(pipeline), "-o", str(out),
                 "--set", "train.num_steps=7"]) == 0
    printed = capsys.readouterr()
    assert f"wrote {out}" in printed.out
    config = load_config(out)
    assert config.train.init_checkpoint.path == "PATH_TO_BE_CONFIGURED/mobilenet_v2.ckpt-1"
    # no fine_tune_checkpoint_type: TF's config_util makes it "classification" (the
    # deprecated from_detection_checkpoint is false)
    assert config.train.init_checkpoint.restore == "classification"
    assert config == load_pipeline_config(pipeline, ["train.num_steps=7"])
    text = out.read_text()
    assert "model.ssd.matcher.argmax_matcher.use_matmul_gather" in text  # listed, not dropped


@pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="../shared absent")
def test_placeholder_paths_stop_training_naming_the_field(tmp_path, capsys):
    tf_config = TFOD_CONFIGS / "ssd_mobilenet_v2_320x320_coco17_tpu-8.config"
    code = main(["train", "--pipeline-config", str(tf_config), "--workdir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "data.train.input_path" in err
    assert "train_input_reader.tf_record_input_reader.input_path" in err
    assert "--set data.train.input_path=" in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_unsupported_architecture_exits_2_with_one_line(tmp_path, capsys):
    """A Faster R-CNN whose feature extractor jaxdet lacks (NASNet) stops in one line naming
    the field and what is supported."""
    path = tmp_path / "frcnn.config"
    path.write_text("model { faster_rcnn { num_classes: 3 feature_extractor { type: "
                    "'faster_rcnn_nas' } } }\n")
    assert main(["summary", "--pipeline-config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "model.faster_rcnn.feature_extractor.type: 'faster_rcnn_nas'" in err
    assert "jaxdet has no NASNet backbone" in err
    assert "jaxdet supports faster_rcnn_resnet50_keras" in err
