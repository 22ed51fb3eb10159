"""TF's commands run by jaxdet, where they refuse: each refusal one line, exit 2 (1 for a
missing TensorFlow), nothing written; and where ``--trained_checkpoint_dir`` finds weights.
(The commands at work: ``tests/e2e/test_tfod_commands.py``.)"""

from __future__ import annotations

import importlib.util

import pytest

from jaxdet.cli import exporter_main_v2
from jaxdet.cli.main import main
from jaxdet.config.loader import ConfigError

HAS_TF = importlib.util.find_spec("tensorflow") is not None


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err.splitlines()[-1] if err else ""


def test_required_flags_are_named(capsys):
    code, line = run(capsys, "model_main_tf2", "--model_dir=run")
    assert code == 2
    assert line == ("config error: --pipeline_config_path must have a value (flags of TF's "
                    "script: --help lists them)")
    code, line = run(capsys, "exporter_main_v2", "--input_type", "image_tensor")
    assert code == 2 and "--pipeline_config_path and --trained_checkpoint_dir and " \
        "--output_directory must have a value" in line


def test_use_tpu_without_a_tpu_is_one_line_and_writes_nothing(capsys, tmp_path):
    """The TF2 tutorial's TPU line (its USE_TPU=true, TPU_NAME) on a machine without one."""
    model_dir = tmp_path / "run"
    code, line = run(capsys, "model_main_tf2", "--pipeline_config_path=unused.config",
                     f"--model_dir={model_dir}", "--use_tpu=true", "--tpu_name=MY_TPU_NAME",
                     "--alsologtostderr")
    assert code == 2
    assert line == ("config error: --use_tpu --tpu_name: JAX finds no TPU here (its backend "
                    "is cpu); run on a Cloud TPU VM, or leave out --use_tpu to train on cpu")
    assert not model_dir.exists()


def test_export_refusals(capsys, tmp_path):
    out = tmp_path / "exported"
    common = ["--pipeline_config_path=p.config", f"--trained_checkpoint_dir={tmp_path}",
              f"--output_directory={out}"]
    code, line = run(capsys, "exporter_main_v2", "--input_type=tf_example", *common)
    assert code == 2 and "--input_type tf_example: jaxdet's SavedModel takes images" in line
    code, line = run(capsys, "exporter_main_v2", *common, "--use_side_inputs", "True")
    assert code == 2 and line.startswith("config error: --use_side_inputs: side inputs are "
                                         "not supported")
    code, line = run(capsys, "export_tflite_graph_tf2", *common,
                     "--keypoint_label_map_path=k.pbtxt")
    assert code == 2 and "--keypoint_label_map_path: not supported" in line
    if not HAS_TF:  # jaxdet's own environment: TensorFlow is an extra
        code, line = run(capsys, "exporter_main_v2", *common)
        assert code == 1
        assert line.startswith("error: --format saved_model needs TensorFlow")
    assert not out.exists()


def test_the_trained_checkpoint_dir_is_a_jaxdet_run_or_tf_checkpoints(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("name: x\n")
    assert exporter_main_v2.trained_weights(str(run_dir)) == exporter_main_v2.Weights(
        str(run_dir), None)
    assert exporter_main_v2.trained_weights(str(run_dir / "checkpoints")) == \
        exporter_main_v2.Weights(str(run_dir), None)
    tf_dir = tmp_path / "model_dir"
    tf_dir.mkdir()
    for n in (1, 2):
        (tf_dir / f"ckpt-{n}.index").write_bytes(b"")
    (tf_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
    assert exporter_main_v2.trained_weights(str(tf_dir)) == exporter_main_v2.Weights(
        None, str(tf_dir / "ckpt-2"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no checkpoint: give a jaxdet run's folder"):
        exporter_main_v2.trained_weights(str(tmp_path / "empty"))


def test_jaxdet_help_names_tfs_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "jaxdet model_main_tf2 --pipeline_config_path=FILE --model_dir=DIR" in " ".join(
        out.split())
    assert main(["model_main_tf2", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: model_main_tf2 --flag=value")
