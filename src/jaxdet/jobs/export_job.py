"""``jaxdet export`` as a job: a workdir's checkpoint (or an imported one) loaded and written
as a serving artifact by ``jaxdet.export``.

    result = export_model(config, "runs/demo", "exported/", format="stablehlo")
"""

from __future__ import annotations

import logging
from pathlib import Path

import jax

from jaxdet import tasks
from jaxdet.config import schema as S
from jaxdet.config.precision import resolve_precision
from jaxdet.export.exporter import (
    FLOAT32_ONLY,
    ExportError,
    ExportResult,
    artifact_input_size,
    check_request,
    export_serving_function,
)
from jaxdet.export.serving import serving_function
from jaxdet.jobs import runs
from jaxdet.results.labels import Labels, labels_of

log = logging.getLogger("jaxdet")


def export_model(config: S.Config, workdir: str | Path | None, out_dir: str | Path, *,
                 format: str = "stablehlo", input_type: str = "image_tensor",
                 batch_size: int | None = None, input_size: tuple[int, int] | None = None,
                 step: int | None = None, checkpoint: str | Path | None = None,
                 checkpoint_format: str = "auto") -> ExportResult:
    """Writes the artifact of ``workdir``'s checkpoint (or ``checkpoint``) to ``out_dir``.

    Args:
      format: one of :data:`FORMATS`; input_type: ``image_tensor`` (uint8),
        ``float_image_tensor`` (float32 0..255) or ``encoded_image_string_tensor`` (JPEG/PNG
        bytes; saved_model only).
      batch_size: a fixed batch; None: any batch (polymorphic) for stablehlo and
        saved_model, 1 for onnx and tflite.
      input_size: (height, width) of the images the artifact takes (default: the model's
        input size); other sizes are resized inside, as the config's resizer does.
    Raises:
      ExportError (one line) for what cannot be exported; FileNotFoundError without a
      checkpoint; nothing is left in ``out_dir`` then.
    """
    out_dir = Path(out_dir)
    check_export_request(out_dir, format, input_type, batch_size)  # before any loading
    family = tasks.resolve(config)
    task, state, step = runs.load_for_inference(family, workdir, step=step,
                                                checkpoint=checkpoint,
                                                checkpoint_format=checkpoint_format)
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


__all__ = ["check_export_request", "export_loaded", "export_model"]
