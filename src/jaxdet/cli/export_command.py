"""``jaxdet export``: a trained model as a serving artifact (StableHLO, ONNX, TF SavedModel,
TFLite, TF's own SSD TFLite file) or, with ``--format tf_checkpoint``, as a TF OD API model_dir."""

from __future__ import annotations

import argparse

from jaxdet.cli.model_args import add_model_source_args, model_of_args
from jaxdet.cli.staging import staged
from jaxdet.config.loader import ConfigError


def add_export_parser(sub) -> None:
    """The ``export`` subcommand and its options, on ``sub`` (argparse's subparsers)."""
    p = sub.add_parser("export", help="write a trained model as a serving artifact "
                       "(StableHLO, ONNX, TF SavedModel or TFLite: images in, the TF OD API's "
                       "detection signature out)")
    add_model_source_args(p)
    p.add_argument("--out", required=True, help="a new folder for the artifact")
    p.add_argument("--format", default="stablehlo",
                   help="stablehlo (default; jax alone, any batch), onnx (ONNX Runtime, a "
                        "fixed batch; pip install 'jaxdet[onnx]'), saved_model (TF Serving, any "
                        "batch), tflite (a fixed batch; builtin operations, jaxdet's NMS), "
                        "tflite_saved_model (the SavedModel TF's TFLite converter makes that "
                        "file from) or tflite_tf (SSD-family models: the file TF's "
                        "export_tflite_graph_tf2 and converter make, normalized float32 input "
                        "and TF's TFLite_Detection_PostProcess operation; int8 with "
                        "--quantize); the TF formats need TensorFlow: make install-tf-export. "
                        "tf_checkpoint: the run as a TF OD API model_dir (ckpt-1 and its "
                        "checkpoint file), which TF's model_main_tf2 evaluates and trains on "
                        "and its exporters export; no TensorFlow needed")
    p.add_argument("--input-type", default="image_tensor",
                   help="image_tensor (uint8 [B, H, W, 3]), float_image_tensor (float32 "
                        "0..255) or encoded_image_string_tensor (JPEG/PNG bytes [B]; "
                        "saved_model only)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="a fixed batch (default: any batch for stablehlo and saved_model, 1 "
                        "for onnx and tflite)")
    p.add_argument("--input-size", type=int, nargs=2, default=None, metavar=("H", "W"),
                   help="the images' size (default: the model's input size; others are "
                        "resized inside as the config's resizer does)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    p.add_argument("--max-detections", type=int, default=None,
                   help="tflite_tf: detections per image (default: the config's "
                        "model.post_processing.max_total_detections)")
    p.add_argument("--regular-nms", action="store_true",
                   help="tflite_tf: TF's regular (per-class) NMS instead of its fast NMS (one "
                        "class per box; TF's default)")
    p.add_argument("--quantize", choices=("int8",), default=None,
                   help="tflite_tf: TF's post-training integer quantization, calibrated on "
                        "images of the config's training data")
    p.add_argument("--representative-images", type=int, default=100, metavar="N",
                   help="with --quantize: how many training images calibrate it (default 100)")


def cmd_export(args: argparse.Namespace) -> int:
    with staged(args):
        return _export(args)


def _export(args: argparse.Namespace) -> int:
    from jaxdet.export.exporter import check_request
    from jaxdet.jobs.export_job import export_model

    if args.format == "tf_checkpoint":
        return _export_tf_checkpoint(args)
    from jaxdet.export.exporter import TF_POSTPROCESS_FORMATS
    from jaxdet.jobs.export_job import TfliteOptions, check_tf_postprocess_request

    check_request(args.format, args.input_type)  # before any checkpoint is read
    tflite = TfliteOptions(max_detections=args.max_detections, regular_nms=args.regular_nms,
                           quantize=args.quantize,
                           representative_images=args.representative_images)
    if args.format in TF_POSTPROCESS_FORMATS:
        check_tf_postprocess_request(args.input_type, args.batch_size, args.input_size, tflite)
    elif tflite != TfliteOptions(representative_images=args.representative_images):
        raise ConfigError("--max-detections, --regular-nms and --quantize are for --format "
                          "tflite_tf (TF's SSD TFLite file)")
    source = model_of_args(args)
    result = export_model(source.config, source.workdir, args.out, format=args.format,
                          input_type=args.input_type, batch_size=args.batch_size,
                          input_size=args.input_size, step=args.step,
                          checkpoint=source.checkpoint,
                          checkpoint_format=args.checkpoint_format, tflite=tflite)
    print(f"wrote {result.line()}")
    print(f"signature: {result.out_dir / 'signature.json'}")
    return 0


def _export_tf_checkpoint(args: argparse.Namespace) -> int:
    """``jaxdet export --format tf_checkpoint``: the run as a TF OD API model_dir."""
    from jaxdet.jobs.tf_run import write_tf_run

    source = model_of_args(args)
    if source.workdir is None or source.checkpoint is not None:
        raise ConfigError("--format tf_checkpoint writes a jaxdet run: give its --workdir")
    written = write_tf_run(source.config, source.workdir, args.out, step=args.step)
    print(f"wrote {written.line()}")
    return 0
