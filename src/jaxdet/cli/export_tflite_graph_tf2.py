"""``export_tflite_graph_tf2``: the TF OD API's first step towards a TFLite model, run by jaxdet
with the same flags: ``--output_directory/saved_model`` is a SavedModel for TF's TFLite
converter, so the next step of a team's script runs unchanged:

    export_tflite_graph_tf2 --pipeline_config_path pipeline.config \\
        --trained_checkpoint_dir run --output_directory tflite_export
    tflite_convert --saved_model_dir=tflite_export/saved_model --output_file=model.tflite

What differs from TF's file (said when it runs): jaxdet's model takes uint8 images [1, H, W, 3]
(its preprocessing inside, where TF's SSD file takes normalized float32 pixels) and ends in
TFLite's builtin operations with jaxdet's own NMS (per class, as TF's ``--ssd_use_regular_nms``),
not TF's ``TFLite_Detection_PostProcess`` custom operation; its outputs are named as the
SavedModel's (``detection_boxes``, ``detection_classes``, ``detection_scores``,
``num_detections``). TF's converter does not put TF's post-processing operation after a
jax2tf module, so the file with TF's own contract (normalized float32 input, the operation and
its outputs, int8 if asked) is written by ``jaxdet export --format tflite_tf`` in one step.
Also ``jaxdet export_tflite_graph_tf2 ...``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from jaxdet.cli.exporter_main_v2 import COMMON_FLAGS, export_like_tf
from jaxdet.cli.tfod_flags import Flag
from jaxdet.cli.tfod_program import require, run_program
from jaxdet.config.loader import ConfigError

PROGRAM = "export_tflite_graph_tf2"
log = logging.getLogger("jaxdet")

FLAGS = (
    *COMMON_FLAGS,
    Flag("max_detections", int, 10, "detections per image "
         "(model.post_processing.max_total_detections)"),
    Flag("ssd_use_regular_nms", bool, False, "accepted: jaxdet's NMS is per class, as TF's "
         "regular NMS (TF's default is its fast, class-agnostic NMS)"),
    Flag("centernet_include_keypoints", bool, False, "accepted: a keypoint model's file has "
         "its keypoint outputs either way"),
    Flag("keypoint_label_map_path", str, None, "not supported (the config's label map names "
         "the keypoint classes)"),
)


def main(argv: list[str] | None = None, *, reexec: bool = True) -> int:
    """Run ``export_tflite_graph_tf2`` with ``argv`` (default ``sys.argv[1:]``)."""
    return run_program(PROGRAM, FLAGS, run, argv, reexec=reexec)


def run(values: dict[str, Any]) -> int:
    """Write ``--output_directory/saved_model`` for TF's TFLite converter."""
    require(values, "pipeline_config_path", "trained_checkpoint_dir", "output_directory")
    if values["keypoint_label_map_path"]:
        raise ConfigError("--keypoint_label_map_path: not supported; the keypoint classes are "
                          "named by the pipeline.config's label map")
    if values["max_detections"] < 1:
        raise ConfigError(f"--max_detections {values['max_detections']}: must be >= 1")
    if not values["ssd_use_regular_nms"]:
        log.warning("jaxdet's TFLite file ends in its own per-class NMS (TF's "
                    "--ssd_use_regular_nms), not TF's fast NMS in TFLite_Detection_PostProcess")
    log.warning("jaxdet's TFLite file takes uint8 images [1, H, W, 3] (preprocessing inside), "
                "not TF's normalized float32 pixels; outputs: detection_boxes, "
                "detection_classes, detection_scores, num_detections. TF's own file "
                "(TFLite_Detection_PostProcess, its outputs, int8 if asked): jaxdet export "
                "--format tflite_tf")
    overrides = (f"{max_detections_field(values['pipeline_config_path'])}="
                 f"{values['max_detections']}",)
    export = export_like_tf(values, format="tflite_saved_model", input_type="image_tensor",
                            overrides=overrides, tflite_ready=True)
    print(f"wrote {export.out}/saved_model (for tflite_convert --saved_model_dir), "
          f"checkpoint, pipeline.config and signature.json ({export.line})")
    return 0


# the jaxdet field that --max_detections sets, by family (TF's script takes SSD and CenterNet)
MAX_DETECTIONS = {"ssd": "model.post_processing.max_total_detections",
                  "center_net": "model.post_processing.max_detections"}


def max_detections_field(pipeline_config: str) -> str:
    """The config field ``--max_detections`` sets; ConfigError for a model TF's script does
    not export to TFLite either."""
    from jaxdet.config.tfod import load_pipeline_config

    kind = load_pipeline_config(pipeline_config).model.type
    if kind not in MAX_DETECTIONS:
        raise ConfigError(f"{pipeline_config}: a {kind} model; TF's export_tflite_graph_tf2 "
                          "takes SSD and CenterNet models (jaxdet export --format tflite "
                          "writes the others)")
    return MAX_DETECTIONS[kind]


if __name__ == "__main__":
    sys.exit(main())
