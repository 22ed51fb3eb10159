"""``exporter_main_v2``: the TF OD API's SavedModel exporter, run by jaxdet with the same flags,
writing TF's layout, so a team's export scripts and TF Serving fleet work unchanged.

    exporter_main_v2 --input_type image_tensor --pipeline_config_path pipeline.config \\
        --trained_checkpoint_dir run --output_directory exported

writes ``exported/saved_model/`` (signature ``serving_default``: TF's detection outputs),
``exported/checkpoint/ckpt-0`` (the weights as a TF2 checkpoint),
``exported/pipeline.config`` (with ``--config_override`` merged in) and
``exported/signature.json`` (jaxdet's description of the inputs, outputs and labels).
``--trained_checkpoint_dir`` is a jaxdet run (its latest checkpoint) or a folder of TF
checkpoints (its latest ``ckpt-N``, as TF reads it). Needs TensorFlow in jaxdet's
environment (``pip install 'jaxdet[tf-export]'``). Also ``jaxdet exporter_main_v2 ...``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxdet import files
from jaxdet.cli.tfod_flags import Flag
from jaxdet.cli.tfod_program import require, run_program
from jaxdet.config.loader import ConfigError

PROGRAM = "exporter_main_v2"
log = logging.getLogger("jaxdet")

COMMON_FLAGS = (
    Flag("pipeline_config_path", str, None, "the pipeline.config of the model (required)"),
    Flag("trained_checkpoint_dir", str, None, "a jaxdet run (its latest checkpoint) or a "
         "folder of TF checkpoints (its latest ckpt-N) (required)"),
    Flag("output_directory", str, None, "where the export goes: saved_model/ and "
         "pipeline.config (required)"),
    Flag("config_override", str, "", "a pipeline.config text proto merged into "
         "--pipeline_config_path's, as TF merges it"),
)
FLAGS = (
    Flag("input_type", str, "image_tensor", "image_tensor (uint8 [B, H, W, 3]), "
         "float_image_tensor (float32) or encoded_image_string_tensor (JPEG/PNG bytes [B]); "
         "tf_example is not supported"),
    *COMMON_FLAGS,
    Flag("use_side_inputs", bool, False, "not supported (no jaxdet model takes side inputs)"),
    Flag("side_input_shapes", str, "", "not supported"),
    Flag("side_input_types", str, "", "not supported"),
    Flag("side_input_names", str, "", "not supported"),
)
TF_INPUT_TYPES = ("image_tensor", "float_image_tensor", "encoded_image_string_tensor",
                  "tf_example")
# what TF's exporters write into --output_directory, and so what a new export replaces
EXPORT_NAMES = ("saved_model", "checkpoint", "signature.json", "pipeline.config")


def main(argv: list[str] | None = None, *, reexec: bool = True) -> int:
    """Run ``exporter_main_v2`` with ``argv`` (default ``sys.argv[1:]``); the exit code."""
    return run_program(PROGRAM, FLAGS, run, argv, reexec=reexec)


def run(values: dict[str, Any]) -> int:
    """Export the checkpoint as TF Serving's SavedModel into ``--output_directory``."""
    require(values, "pipeline_config_path", "trained_checkpoint_dir", "output_directory")
    side = [f"--{n}" for n in ("use_side_inputs", "side_input_shapes", "side_input_types",
                               "side_input_names") if values[n]]
    if side:
        raise ConfigError(f"{', '.join(side)}: side inputs are not supported (no jaxdet model "
                          "takes them); leave them out")
    input_type = values["input_type"]
    if input_type not in TF_INPUT_TYPES:
        raise ConfigError(f"--input_type {input_type}: TF's input types are "
                          f"{', '.join(TF_INPUT_TYPES)}")
    if input_type == "tf_example":
        raise ConfigError("--input_type tf_example: jaxdet's SavedModel takes images "
                          "(image_tensor, float_image_tensor) or their JPEG/PNG bytes "
                          "(encoded_image_string_tensor), not serialized tf.Examples")
    export = export_like_tf(values, format="saved_model", input_type=input_type)
    print(f"wrote {export.out}/saved_model, checkpoint, pipeline.config and signature.json "
          f"({export.line})")
    return 0


@dataclass(frozen=True)
class Weights:
    """Where ``--trained_checkpoint_dir``'s weights are: a jaxdet workdir, or a TF checkpoint
    prefix (``checkpoint``, format ``tf``)."""

    workdir: str | None
    checkpoint: str | None


def trained_weights(folder: str) -> Weights:
    """The weights in ``--trained_checkpoint_dir``: a jaxdet run (``config.yaml`` /
    ``checkpoints/``, or that ``checkpoints/`` folder itself) or TF checkpoints (the
    ``checkpoint`` state file's latest, else the one ``ckpt-N``). ConfigError if neither."""
    from jaxdet.interop.tf_checkpoint import resolve_prefix

    text = os.fspath(folder).rstrip("/")
    if not files.isdir(text):
        raise ConfigError(f"--trained_checkpoint_dir {text} does not exist")
    if files.basename(text) == "checkpoints" and files.isfile(
            files.join(files.parent(text), "config.yaml")):
        return Weights(files.parent(text), None)
    if files.isfile(files.join(text, "config.yaml")) or files.isdir(
            files.join(text, "checkpoints")):
        return Weights(text, None)
    if files.isfile(files.join(text, "checkpoint")) or files.glob(
            files.join(text, "*.index"), files_only=True):
        return Weights(None, resolve_prefix(text))
    raise ConfigError(f"--trained_checkpoint_dir {text} holds no checkpoint: give a jaxdet "
                      "run's folder or a folder of TF checkpoints (ckpt-N.index)")


@dataclass(frozen=True)
class Exported:
    out: str
    line: str


def export_like_tf(values: dict[str, Any], *, format: str, input_type: str,
                   overrides: tuple[str, ...] = (), tflite_ready: bool = False) -> Exported:
    """Export ``--trained_checkpoint_dir``'s weights of ``--pipeline_config_path`` (with
    ``--config_override`` merged, and jaxdet ``overrides``) into ``--output_directory`` as TF's
    exporters lay it out: ``saved_model/``, ``checkpoint/ckpt-0``, ``pipeline.config`` (the
    merged one), ``signature.json``. A previous export there is replaced (as TF overwrites
    it); nothing is replaced before the new export is complete. ``tflite_ready``: the
    SavedModel TF's TFLite converter takes (a batch of one, TFLite's builtin operations)."""
    from jaxdet.config.tfod import load_pipeline_config
    from jaxdet.config.tfod_proto import merged_pipeline_text
    from jaxdet.export.exporter import check_request
    from jaxdet.jobs.export_job import export_model

    check_request(format, input_type)  # TensorFlow present, before any work
    out = values["output_directory"]
    if files.is_url(out):
        raise ConfigError(f"--output_directory {out}: give a local folder (copy the export to "
                          "the bucket after)")
    weights = trained_weights(values["trained_checkpoint_dir"])
    source = values["pipeline_config_path"]
    if not files.isfile(source):
        raise ConfigError(f"--pipeline_config_path {source} does not exist")
    text = files.read_text(source)
    load_pipeline_config(source)  # the file's own errors name the file and line
    merged = merged_pipeline_text(text, values["config_override"], source) if (
        values["config_override"].strip()) else text
    Path(out).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".jaxdet-export-", dir=out))
    try:
        (staging / "pipeline.config").write_text(merged)
        config = load_pipeline_config(staging / "pipeline.config", overrides)
        result = export_model(config, weights.workdir, staging / "export", format=format,
                              input_type=input_type, checkpoint=weights.checkpoint,
                              checkpoint_format="tf" if weights.checkpoint else "auto",
                              batch_size=1 if tflite_ready else None)
        (staging / "export" / "pipeline.config").write_text(merged)
        _write_checkpoint_folder(config, weights, staging / "export" / "checkpoint")
        for name in EXPORT_NAMES:  # the new export complete: replace the old one
            target = Path(out) / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            (staging / "export" / name).rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Exported(out, result.line())


def _write_checkpoint_folder(config, weights: Weights, folder: Path) -> None:
    """``checkpoint/ckpt-0`` as TF's exporters write it: the weights exported, as a TF2
    checkpoint (a jaxdet run's written by ``jobs.tf_run.write_tf_run``; a TF checkpoint's
    copied)."""
    from jaxdet.interop.tf_checkpoint_writer import write_checkpoint_state
    from jaxdet.jobs.tf_run import write_tf_run

    if weights.workdir is not None:
        write_tf_run(config, weights.workdir, folder, name="ckpt-0", optimizer=False)
        return
    folder.mkdir(parents=True)
    for path in files.glob(f"{weights.checkpoint}.*", files_only=True):
        suffix = files.basename(path)[len(files.basename(weights.checkpoint)):]
        (folder / f"ckpt-0{suffix}").write_bytes(files.read_bytes(path))
    write_checkpoint_state(folder, "ckpt-0")


if __name__ == "__main__":
    sys.exit(main())
