"""``jaxdet export``: a trained model as a self-contained serving artifact.

    result = export_model(config, "runs/demo", "exported/", format="stablehlo")

Formats (one folder each, written to a temporary folder first and moved into place when
complete, so a failed export leaves nothing half-written):

* ``stablehlo``: ``model.stablehlo``, the serialized ``jax.export.Exported`` of
  :func:`jaxdet.export.serving.serving_function` (weights inside), lowered for CPU, CUDA and
  TPU; it runs with jax alone (``jax.export.deserialize(bytes).call(images)``), no jaxdet.
  The batch is polymorphic (any B) unless ``batch_size`` fixes it.
* ``onnx``: ``model.onnx`` (opset 23, converted by jax2onnx, ``make install-export``), for ONNX
  Runtime; a fixed batch (default 1). Max pooling is traced as strided slices
  (``core.portable.exportable``) and NMS has no scatter or gather in its loop, so the
  whole model, NMS included, is one ONNX graph.

Every folder also holds ``signature.json``: the format, input name / type / shape, the output
names and shapes, the label map (id -> name) and the keypoint names per class, the config's
name and the jax version it was written with.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxdet import builders, runs, tasks
from jaxdet.config import schema as S
from jaxdet.export.serving import INPUT_TYPES, serving_function

log = logging.getLogger("jaxdet")

FORMATS = ("stablehlo", "onnx")
ARTIFACTS = {"stablehlo": "model.stablehlo", "onnx": "model.onnx"}
PLANNED = {  # format -> why it is not written yet (one line for the CLI)
    "saved_model": "TF SavedModel export is not available yet (planned: issue 19); use "
                   "--format stablehlo or onnx",
    "tflite": "TFLite export is not available yet (planned: issue 19); use --format stablehlo "
              "or onnx",
}
PLATFORMS = ("cpu", "cuda", "tpu")


class ExportError(ValueError):
    """An export that cannot be done, said in one line."""


@dataclass
class ExportResult:
    """What was written: the folder, the artifact file, its size and the signature."""

    out_dir: Path
    artifact: Path
    size_bytes: int
    signature: dict

    def line(self) -> str:
        s = self.signature
        return (f"{self.artifact} ({self.size_bytes / 1e6:.1f} MB): {s['input']['name']} "
                f"{s['input']['dtype']}{s['input']['shape']} -> "
                f"{', '.join(s['outputs'])} on {', '.join(s['platforms'])}")


def check_request(format: str, input_type: str) -> None:
    """Refuses, in one line, a format or input type this exporter cannot write."""
    if format in PLANNED:
        raise ExportError(PLANNED[format])
    if format not in FORMATS:
        raise ExportError(f"--format {format!r}: allowed {', '.join(FORMATS)} (planned: "
                          f"{', '.join(PLANNED)})")
    if input_type not in INPUT_TYPES:
        raise ExportError(f"--input-type {input_type!r}: allowed {', '.join(INPUT_TYPES)}")
    if input_type == "encoded_image_string_tensor":
        raise ExportError(f"--input-type encoded_image_string_tensor: a {format} model cannot "
                          "decode JPEG/PNG bytes; decode on the host and use image_tensor")


def _input_size(config: S.Config, input_size: tuple[int, int] | None) -> tuple[int, int]:
    if input_size is not None:
        h, w = (int(v) for v in input_size)
        if h < 1 or w < 1:
            raise ExportError(f"--input-size {h} {w}: both must be >= 1")
        return h, w
    return builders.input_size(config.data)


def _signature(config: S.Config, input_type: str, shape: list, outputs: dict,
               ids: list[int], names: list[str], layout: Any, platforms: tuple) -> dict:
    dtype = "uint8" if input_type == "image_tensor" else "float32"
    classes = []
    for k, (i, n) in enumerate(zip(ids, names, strict=True)):
        entry = {"id": int(i), "name": n}
        group = layout.group_of_class(k) if layout else None
        if group is not None:
            entry["keypoints"] = list(group.names)
        classes.append(entry)
    return {
        "config": config.name, "jax": jax.__version__,
        "platforms": list(platforms),
        "input": {"name": input_type, "dtype": dtype, "shape": shape,
                  "layout": "[batch, height, width, 3] RGB, 0..255"},
        "outputs": {k: {"dtype": str(v.dtype), "shape": [str(d) for d in v.shape]}
                    for k, v in outputs.items()},
        "label_map": classes,
    }


def export_model(config: S.Config, workdir: str | Path | None, out_dir: str | Path, *,
                 format: str = "stablehlo", input_type: str = "image_tensor",
                 batch_size: int | None = None, input_size: tuple[int, int] | None = None,
                 step: int | None = None, checkpoint: str | Path | None = None,
                 checkpoint_format: str = "auto") -> ExportResult:
    """Writes the artifact of ``workdir``'s checkpoint (or ``checkpoint``) to ``out_dir``.

    Args:
      format: one of :data:`FORMATS`; input_type: ``image_tensor`` (uint8) or
        ``float_image_tensor`` (float32 0..255).
      batch_size: a fixed batch; None: any batch (polymorphic).
      input_size: (height, width) of the images the artifact takes (default: the model's
        input size); other sizes are resized inside, as the config's resizer does.
    Raises:
      ExportError (one line) for what cannot be exported; FileNotFoundError without a
      checkpoint; nothing is left in ``out_dir`` then.
    """
    check_request(format, input_type)
    if batch_size is not None and batch_size < 1:
        raise ExportError(f"--batch-size {batch_size}: must be >= 1")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ExportError(f"--out {out_dir} exists and is not empty; give a new folder")
    task, state, step = runs.load_for_inference(config, workdir, step=step,
                                                checkpoint=checkpoint,
                                                checkpoint_format=checkpoint_format)
    from jaxdet.predict import class_labels, keypoint_layout

    ids, names = class_labels(config, workdir or out_dir.parent)
    layout = keypoint_layout(config, names)
    params, batch_stats = runs.inference_variables(config, state)
    fn = serving_function(task, config, params, batch_stats, class_ids=ids,
                          pads_raw_pixels=tasks.family(config).pads_raw_pixels,
                          keypoint_layout=layout)
    height, width = _input_size(config, input_size)
    if format == "onnx":
        batch_size = batch_size or 1
        payload, outputs = export_onnx(fn, (height, width), batch_size=batch_size,
                                       input_type=input_type)
        platforms: tuple[str, ...] = ("onnxruntime",)
    else:
        exported = export_stablehlo(fn, (height, width), batch_size=batch_size,
                                    input_type=input_type)
        payload, platforms = exported.serialize(), PLATFORMS
        outputs = dict(zip(output_names_of(exported), exported.out_avals, strict=True))
    shape = ["batch" if batch_size is None else batch_size, height, width, 3]
    signature = _signature(config, input_type, shape, outputs, ids, names, layout, platforms)
    signature["format"] = format
    signature["checkpoint_step"] = step if isinstance(step, int) else str(step)
    return _write(out_dir, ARTIFACTS[format], payload, signature)


def _input_spec(size: tuple[int, int], batch_size: int | None, input_type: str
                ) -> jax.ShapeDtypeStruct:
    batch = jax.export.symbolic_shape("batch")[0] if batch_size is None else batch_size
    dtype = np.uint8 if input_type == "image_tensor" else np.float32
    return jax.ShapeDtypeStruct((batch, *size, 3), dtype)


def export_stablehlo(fn, size: tuple[int, int], *, batch_size: int | None = None,
                     input_type: str = "image_tensor",
                     platforms: tuple[str, ...] = PLATFORMS) -> jax.export.Exported:
    """``jax.export`` of a serving function for images of ``size`` (H, W): batch
    ``batch_size`` or polymorphic (None), uint8 (``image_tensor``) or float32 input, lowered
    for ``platforms``. Raises ExportError (one line) when it cannot be lowered."""
    spec = _input_spec(size, batch_size, input_type)
    try:
        return jax.export.export(jax.jit(fn), platforms=platforms)(spec)
    except Exception as e:  # noqa: BLE001 - any lowering failure is reported in one line
        raise ExportError(f"the model cannot be lowered to StableHLO: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}") from e


def export_onnx(fn, size: tuple[int, int], *, batch_size: int, input_type: str
                ) -> tuple[bytes, dict]:
    """(the ONNX model as a serialized ``ModelProto``, {output name: shape/dtype}) of a serving
    function for a fixed batch; its input is named ``input_type``, its outputs by their keys
    (in the function's flattened order: sorted). Raises ExportError (one line) without
    jax2onnx or when the conversion fails."""
    try:
        from jax2onnx import to_onnx
    except ImportError as e:
        raise ExportError("--format onnx needs jax2onnx, onnx and onnxruntime: run `make "
                          "install-export`") from e
    from jaxdet.core.portable import exportable

    spec = _input_spec(size, batch_size, input_type)
    outputs = dict(sorted(jax.eval_shape(fn, spec).items()))
    try:
        with exportable():
            model = to_onnx(fn, [spec], input_names=[input_type], output_names=list(outputs),
                            return_mode="proto")
    except Exception as e:  # noqa: BLE001 - any conversion failure is reported in one line
        raise ExportError(f"the model cannot be converted to ONNX: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}") from e
    return model.SerializeToString(), outputs


def output_names_of(exported: jax.export.Exported) -> list[str]:
    """The output dict's keys in the order of ``exported.out_avals``."""
    tree = exported.out_tree
    index = jax.tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    return [name for name, _ in sorted(index.items(), key=lambda item: item[1])]


def _write(out_dir: Path, name: str, payload: bytes, signature: dict) -> ExportResult:
    """Writes ``name`` and signature.json into a temporary sibling folder, then moves it to
    ``out_dir``."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        (tmp / name).write_bytes(payload)
        (tmp / "signature.json").write_text(json.dumps(signature, indent=1))
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    artifact = out_dir / name
    return ExportResult(out_dir, artifact, artifact.stat().st_size, signature)


__all__ = ["FORMATS", "ExportError", "ExportResult", "check_request", "export_model",
           "export_onnx", "export_stablehlo", "output_names_of"]
