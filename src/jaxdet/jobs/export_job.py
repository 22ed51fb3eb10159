"""``jaxdet export`` as a job: a workdir's checkpoint (or an imported one) loaded and written
as a serving artifact by ``jaxdet.export``.

    result = export_model(config, "runs/demo", "exported/", format="stablehlo")
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from jaxdet import tasks
from jaxdet.config import schema as S
from jaxdet.config.precision import resolve_precision
from jaxdet.export.exporter import (
    FLOAT32_ONLY,
    TF_POSTPROCESS_FORMATS,
    ExportError,
    ExportResult,
    artifact_input_size,
    check_request,
    export_serving_function,
    export_tf_postprocess_model,
)
from jaxdet.export.serving import serving_function
from jaxdet.jobs import runs
from jaxdet.results.labels import Labels, labels_of

log = logging.getLogger("jaxdet")


def export_model(config: S.Config, workdir: str | Path | None, out_dir: str | Path, *,
                 format: str = "stablehlo", input_type: str = "image_tensor",
                 batch_size: int | None = None, input_size: tuple[int, int] | None = None,
                 step: int | None = None, checkpoint: str | Path | None = None,
                 checkpoint_format: str = "auto",
                 tflite: TfliteOptions | None = None) -> ExportResult:
    """Writes the artifact of ``workdir``'s checkpoint (or ``checkpoint``) to ``out_dir``.

    Args:
      format: one of :data:`FORMATS`; input_type: ``image_tensor`` (uint8),
        ``float_image_tensor`` (float32 0..255) or ``encoded_image_string_tensor`` (JPEG/PNG
        bytes; saved_model only).
      batch_size: a fixed batch; None: any batch (polymorphic) for stablehlo and
        saved_model, 1 for onnx and tflite.
      input_size: (height, width) of the images the artifact takes (default: the model's
        input size); other sizes are resized inside, as the config's resizer does.
      tflite: for the ``tflite_tf`` format (TF's SSD TFLite contract): detections, NMS and
        quantization (default :class:`TfliteOptions`'s).
    Raises:
      ExportError (one line) for what cannot be exported; FileNotFoundError without a
      checkpoint; nothing is left in ``out_dir`` then.
    """
    out_dir = Path(out_dir)
    check_export_request(out_dir, format, input_type, batch_size)  # before any loading
    if format in TF_POSTPROCESS_FORMATS:
        check_tf_postprocess_request(input_type, batch_size, input_size, tflite)
    family = tasks.resolve(config)
    task, state, step = runs.load_for_inference(family, workdir, step=step,
                                                checkpoint=checkpoint,
                                                checkpoint_format=checkpoint_format)
    if format in TF_POSTPROCESS_FORMATS:
        return export_tf_postprocess(family, task, runs.inference_variables(config, state),
                                     step, labels_of(config, workdir or out_dir.parent),
                                     out_dir, format=format, workdir=workdir,
                                     options=tflite or TfliteOptions())
    return export_loaded(family, task, runs.inference_variables(config, state), step,
                         labels_of(config, workdir or out_dir.parent), out_dir, format=format,
                         input_type=input_type, batch_size=batch_size, input_size=input_size)


def check_export_request(out_dir: Path, format: str, input_type: str,
                         batch_size: int | None) -> None:
    """ExportError, before any work, for a format / input type / batch that cannot be
    exported or an ``out_dir`` that holds files."""
    check_request(format, input_type)
    if batch_size is not None and batch_size < 1:
        raise ExportError(f"--batch-size {batch_size}: must be >= 1")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ExportError(f"--out {out_dir} exists and is not empty; give a new folder")


def export_loaded(family: tasks.Family, task, variables: tuple, step: int | str, labels: Labels,
                  out_dir: str | Path, *, format: str = "stablehlo",
                  input_type: str = "image_tensor", batch_size: int | None = None,
                  input_size: tuple[int, int] | None = None) -> ExportResult:
    """Write the artifact of loaded weights (``variables``: (params, batch_stats) of checkpoint
    ``step``) of ``task``, built from ``family``'s config, whose classes are ``labels``; the
    other arguments as :func:`export_model`."""
    out_dir = Path(out_dir)
    check_export_request(out_dir, format, input_type, batch_size)
    params, batch_stats = variables
    ids, names, layout = list(labels.ids), list(labels.names), labels.keypoint_layout
    config = resolve_precision(family.config, jax.default_backend(), "export")
    if format in FLOAT32_ONLY and config.precision != "fp32":
        log.warning("%s computes in float32: exporting the %s model in float32 (its outputs "
                    "equal `jaxdet predict --set precision=fp32`)", format, config.precision)
        config = config.model_copy(update={"precision": "fp32"})
        task = family.with_config(config).build_task()  # float32 weights in every precision
    fn = serving_function(task, config, params, batch_stats, class_ids=ids,
                          pads_raw_pixels=family.pads_raw_pixels,
                          keypoint_layout=layout)
    return export_serving_function(fn, config, out_dir, artifact_input_size(config, input_size),
                                   format=format, input_type=input_type,
                                   batch_size=batch_size, class_ids=ids, class_names=names,
                                   keypoint_layout=layout, step=step)


@dataclass(frozen=True)
class TfliteOptions:
    """The ``tflite_tf`` format's settings: ``max_detections`` (None: the config's
    ``model.post_processing.max_total_detections``), ``regular_nms`` (TF's per-class NMS;
    False: TF's default fast NMS, one class per box), ``quantize`` (None: float32; ``int8``:
    TF's post-training integer quantization, calibrated on ``representative_images`` images of
    the config's training data)."""

    max_detections: int | None = None
    regular_nms: bool = False
    quantize: str | None = None
    representative_images: int = 100


def check_tf_postprocess_request(input_type: str, batch_size: int | None,
                                 input_size: tuple[int, int] | None,
                                 options: TfliteOptions | None) -> None:
    """ExportError, before any loading, for what TF's SSD TFLite contract does not take."""
    if input_type != "image_tensor":
        raise ExportError(f"--input-type {input_type}: TF's SSD TFLite file takes the "
                          "normalized float32 image [1, H, W, 3]; leave --input-type out")
    if batch_size not in (None, 1):
        raise ExportError(f"--batch-size {batch_size}: TF's SSD TFLite file takes one image")
    if input_size is not None:
        raise ExportError("--input-size: TF's SSD TFLite file takes the model's own input "
                          "size (resize on the host)")
    options = options or TfliteOptions()
    if options.max_detections is not None and options.max_detections < 1:
        raise ExportError(f"--max-detections {options.max_detections}: must be >= 1")
    if options.quantize not in (None, "int8"):
        raise ExportError(f"--quantize {options.quantize}: allowed int8")
    if options.representative_images < 1:
        raise ExportError(f"--representative-images {options.representative_images}: "
                          "must be >= 1")


def export_tf_postprocess(family: tasks.Family, task, variables: tuple, step: int | str,
                          labels: Labels, out_dir: str | Path, *, format: str,
                          workdir: str | Path | None, options: TfliteOptions) -> ExportResult:
    """TF's SSD TFLite file (``tflite_tf``) of loaded weights; ExportError for a model
    without TF's post-processing (not an SSD-family model, or one the operation cannot
    decode)."""
    if not hasattr(task, "detection_postprocess_attributes"):
        raise ExportError(f"--format {format}: TF's TFLite_Detection_PostProcess file is made "
                          f"for SSD-family models (SSD, RetinaNet, EfficientDet); this is a "
                          f"{family.name} model: use --format tflite")
    config = family.config
    if config.precision != "fp32":
        config = config.model_copy(update={"precision": "fp32"})
        task = family.with_config(config).build_task()  # float32 weights in every precision
    try:
        task.detection_postprocess_attributes()
    except ValueError as e:
        raise ExportError(f"--format {format}: {e}") from e
    representative = None
    if options.quantize:
        representative = representative_images(config, workdir, options.representative_images,
                                               pads_raw_pixels=family.pads_raw_pixels)
    max_detections = (options.max_detections
                      or config.model.post_processing.max_total_detections)
    params, batch_stats = variables
    return export_tf_postprocess_model(
        task, params, batch_stats, config, Path(out_dir), format=format,
        max_detections=max_detections, regular_nms=options.regular_nms,
        quantize=options.quantize, representative=representative,
        class_ids=list(labels.ids), class_names=list(labels.names), step=step)


def representative_images(config: S.Config, workdir: str | Path | None, count: int, *,
                          pads_raw_pixels: bool) -> Callable[[], Iterator[np.ndarray]]:
    """``images()`` yields the first ``count`` images of the config's training data (in
    order), each f32 [1, H, W, 3] as the network takes it (resized and normalized as for
    evaluation): what TF's converter calibrates integer quantization on."""
    from jaxdet.data import build as data_build

    source = data_build.build_source(config.data.train, workdir,
                                     num_classes=config.model.num_classes, field="data.train")
    loader = data_build.build_eval_loader(config, source)
    normalize = data_build.pixel_normalizer(config, pads_raw_pixels=pads_raw_pixels)

    def images() -> Iterator[np.ndarray]:
        done = 0
        for batch in loader:
            pixels = np.asarray(normalize(batch["images"], batch["image_info"]), np.float32)
            for image, real in zip(pixels, batch["mask"], strict=True):
                if real and done < count:
                    done += 1
                    yield image[None]
            if done >= count:
                return
        if done == 0:
            raise ExportError("--quantize int8: the config's training data (data.train) "
                              "holds no image to calibrate on")

    return images


__all__ = ["TfliteOptions", "check_export_request", "check_tf_postprocess_request",
           "export_loaded", "export_model", "export_tf_postprocess", "representative_images"]
