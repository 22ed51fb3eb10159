"""``jaxdet export``: a trained model as a self-contained serving artifact.

    result = export_serving_function(fn, config, "exported/", (640, 640), format="stablehlo",
                                     input_type="image_tensor", batch_size=None,
                                     class_ids=ids, class_names=names)

(``app.export_job.export_model`` loads a workdir's checkpoint and calls it.)

Formats (one folder each, written to a temporary folder first and moved into place when
complete, so a failed export leaves nothing half-written):

* ``stablehlo``: ``model.stablehlo``, the serialized ``jax.export.Exported`` of
  :func:`jaxdet.export.serving.serving_function` (weights inside), lowered for CPU, CUDA and
  TPU; it runs with jax alone (``jax.export.deserialize(bytes).call(images)``), no jaxdet.
  The batch is polymorphic (any B) unless ``batch_size`` fixes it.
* ``onnx``: ``model.onnx`` (opset 23, converted by jax2onnx; ``pip install 'jaxdet[onnx]'``), for
  ONNX Runtime; a fixed batch (default 1). Max pooling is traced as strided slices and greedy NMS
  as one primitive (``core.portable.exportable``) that becomes ONNX ``NonMaxSuppression``
  (``export/onnx_nms.py``), so the whole model, NMS included, is one ONNX graph without loops;
  convolutions as plain convolutions (ONNX Runtime's kernels, not jaxdet's CPU rewrites).
* ``saved_model``: ``saved_model/`` (TF Serving, ``tf.saved_model.load``; signature
  ``serving_default``, input ``input_tensor``), any batch unless ``batch_size`` fixes it; also
  takes ``encoded_image_string_tensor`` (JPEG/PNG bytes decoded in the graph).
* ``tflite``: ``model.tflite`` (TFLite builtin ops only), a fixed batch (default 1).
* ``tflite_saved_model``: ``saved_model/``, the SavedModel that TF's TFLite converter turns
  into that ``model.tflite`` (``tflite_convert --saved_model_dir``): what TF's
  ``export_tflite_graph_tf2.py`` writes for the converter to take; a fixed batch (default 1).
  The three need TensorFlow (``make install-tf-export``); see :mod:`jaxdet.export.tf_formats`.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxdet.backends import trace
from jaxdet.config import schema as S
from jaxdet.core.portable import exportable, fresh_trace
from jaxdet.data import build as data_build
from jaxdet.export.serving import INPUT_TYPES
from jaxdet.export.tf_formats import INPUT_NAME

log = logging.getLogger("jaxdet")

FORMATS = ("stablehlo", "onnx", "saved_model", "tflite", "tflite_saved_model", "tflite_tf")
ARTIFACTS = {"stablehlo": "model.stablehlo", "onnx": "model.onnx",
             "saved_model": "saved_model", "tflite": "model.tflite",
             "tflite_saved_model": "saved_model", "tflite_tf": "model.tflite"}
# TF's own SSD TFLite contract (export.tflite_ssd): the network's raw outputs, then TF's
# TFLite_Detection_PostProcess operation; written from the task, not a serving function
TF_POSTPROCESS_FORMATS = ("tflite_tf",)
TF_FORMATS = ("saved_model", "tflite", "tflite_saved_model", *TF_POSTPROCESS_FORMATS)
DECODES_IMAGES = ("saved_model",)  # formats whose runtime decodes JPEG/PNG in the graph
# formats written for one batch size (default 1)
FIXED_BATCH = ("onnx", "tflite", "tflite_saved_model", *TF_POSTPROCESS_FORMATS)
# runtimes without bfloat16 / float16 compute on CPU
FLOAT32_ONLY = ("onnx", "tflite", "tflite_saved_model", *TF_POSTPROCESS_FORMATS)
RUNTIMES = {"stablehlo": ("cpu", "cuda", "tpu"), "onnx": ("onnxruntime",),
            "saved_model": ("tensorflow", "tf-serving"), "tflite": ("tflite",),
            "tflite_saved_model": ("tflite-converter",), "tflite_tf": ("tflite",)}
PLATFORMS = RUNTIMES["stablehlo"]


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
    if format not in FORMATS:
        raise ExportError(f"--format {format!r}: allowed {', '.join(FORMATS)}")
    if input_type not in INPUT_TYPES:
        raise ExportError(f"--input-type {input_type!r}: allowed {', '.join(INPUT_TYPES)}")
    if input_type == "encoded_image_string_tensor" and format not in DECODES_IMAGES:
        raise ExportError(f"--input-type encoded_image_string_tensor: a {format} model cannot "
                          "decode JPEG/PNG bytes (only saved_model can); decode on the host "
                          "and use image_tensor")
    if format in TF_FORMATS:
        from jaxdet.export.tf_formats import TFUnavailable, import_tf

        try:
            import_tf()
        except TFUnavailable as e:
            raise ExportError(f"--format {format} {e}") from e


def artifact_input_size(config: S.Config,
                        input_size: tuple[int, int] | None) -> tuple[int, int]:
    """(H, W) of the images an artifact takes: ``input_size`` (checked), else the model's."""
    if input_size is not None:
        h, w = (int(v) for v in input_size)
        if h < 1 or w < 1:
            raise ExportError(f"--input-size {h} {w}: both must be >= 1")
        return h, w
    return data_build.input_size(config.data)


def _signature(config: S.Config, input_type: str, shape: list, outputs: dict,
               ids: list[int], names: list[str], layout: Any, platforms: tuple,
               input_name: str) -> dict:
    dtype = {"image_tensor": "uint8", "float_image_tensor": "float32"}.get(input_type, "string")
    if input_type == "encoded_image_string_tensor":
        shape, pixels = shape[:1], f"JPEG/PNG bytes of [{shape[1]}, {shape[2]}, 3] RGB images"
    else:
        pixels = "[batch, height, width, 3] RGB, 0..255"
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
        "input": {"name": input_name, "type": input_type, "dtype": dtype, "shape": shape,
                  "layout": pixels},
        "outputs": {k: {"dtype": str(v.dtype), "shape": [str(d) for d in v.shape]}
                    for k, v in outputs.items()},
        "label_map": classes,
    }


def export_serving_function(fn: Callable, config: S.Config, out_dir: str | Path,
                            size: tuple[int, int], *, format: str, input_type: str,
                            batch_size: int | None, class_ids: list[int],
                            class_names: list[str], keypoint_layout: Any = None,
                            step: Any = None) -> ExportResult:
    """Writes the artifact of a :func:`serving_function` ``fn`` for ``size`` (H, W) images to
    the new folder ``out_dir`` (atomically, with signature.json); what
    ``app.export_job.export_model`` does once the weights are loaded. ``class_ids`` /
    ``class_names`` / ``keypoint_layout`` go into the signature."""
    check_request(format, input_type)
    out_dir = Path(out_dir)
    if format in FIXED_BATCH:
        batch_size = batch_size or 1
    write, outputs = _writer(format, fn, size, batch_size, input_type)
    shape = ["batch" if batch_size is None else batch_size, *size, 3]
    input_name = INPUT_NAME if format in TF_FORMATS else input_type
    signature = _signature(config, input_type, shape, outputs, class_ids, class_names,
                           keypoint_layout, RUNTIMES[format], input_name)
    signature["format"] = format
    signature["checkpoint_step"] = step if isinstance(step, int) else str(step)
    return _write(out_dir, ARTIFACTS[format], write, signature)


def export_tf_postprocess_model(task: Any, params: Any, batch_stats: Any, config: S.Config,
                                out_dir: Path, *, format: str, max_detections: int,
                                regular_nms: bool, quantize: str | None,
                                representative: Callable | None, class_ids: list[int],
                                class_names: list[str], step: Any = None) -> ExportResult:
    """Writes TF's SSD TFLite file of an SSD-family ``task`` (:mod:`export.tflite_ssd`;
    ``quantize="int8"`` with ``representative()``'s images) to the new folder ``out_dir`` as
    ``model.tflite``, with signature.json. ``detection_classes`` are class indices (0-based)
    as in TF's file: signature.json's label map gives each index's id and name."""
    from jaxdet.export import tflite_ssd

    height, width = task.input_size

    def write(path: Path) -> None:
        try:
            path.write_bytes(tflite_ssd.tflite_bytes(
                task, params, batch_stats, max_detections=max_detections,
                use_regular_nms=regular_nms, quantize=quantize, representative=representative))
        except ExportError:
            raise
        except Exception as e:  # noqa: BLE001 - any conversion failure is said in one line
            raise ExportError(f"the model cannot be converted to {format}: "
                              f"{type(e).__name__}: {_first_line(e)}") from e

    d = max_detections
    outputs = {"detection_boxes": _Spec((1, d, 4), "float32"),
               "detection_classes": _Spec((1, d), "float32"),
               "detection_scores": _Spec((1, d), "float32"),
               "num_detections": _Spec((1,), "float32")}
    signature = _signature(config, "float_image_tensor", [1, height, width, 3], outputs,
                           class_ids, class_names, None, RUNTIMES[format],
                           tflite_ssd.INPUT_NAME)
    signature["input"]["layout"] = (
        "[1, height, width, 3] RGB at the model's input size, normalized: "
        f"(pixel - {list(config.data.mean)}) / {list(config.data.std)}")
    signature["outputs_order"] = list(tflite_ssd.OUTPUT_NAMES)
    signature["detection_classes"] = "class index (0-based): label_map[index]"
    signature["nms"] = "regular (per class)" if regular_nms else "fast (one class per box)"
    signature["quantization"] = quantize or "none (float32)"
    signature["format"] = format
    signature["checkpoint_step"] = step if isinstance(step, int) else str(step)
    return _write(out_dir, ARTIFACTS[format], write, signature)


def _writer(format: str, fn, size: tuple[int, int], batch_size: int | None,
            input_type: str) -> tuple[Callable[[Path], None], dict]:
    """(a function writing the artifact at a given path, {output name: shape/dtype})."""
    if format == "stablehlo":
        exported = export_stablehlo(fn, size, batch_size=batch_size, input_type=input_type)
        payload = exported.serialize()
        return (lambda path: path.write_bytes(payload),
                dict(zip(output_names_of(exported), exported.out_avals, strict=True)))
    if format == "onnx":
        payload, outputs = export_onnx(fn, size, batch_size=batch_size, input_type=input_type)
        return lambda path: path.write_bytes(payload), outputs
    from jaxdet.export import tf_formats

    image_type = "float_image_tensor" if input_type == "float_image_tensor" else "image_tensor"
    outputs = dict(sorted(jax.eval_shape(fn, _input_spec(size, batch_size or 1,
                                                         image_type)).items()))
    if batch_size is None:  # traced at batch 1 for the shapes: the signature says "batch"
        outputs = {k: _Spec(("batch", *v.shape[1:]), v.dtype) for k, v in outputs.items()}

    def write(path: Path) -> None:
        try:
            if format == "saved_model":
                tf_formats.write_saved_model(fn, path, size, batch_size=batch_size,
                                             input_type=input_type)
            elif format == "tflite_saved_model":
                tf_formats.write_tflite_saved_model(fn, path, size, batch_size=batch_size,
                                                    input_type=input_type)
            else:
                path.write_bytes(tf_formats.tflite_bytes(fn, size, batch_size=batch_size,
                                                         input_type=input_type))
        except Exception as e:  # noqa: BLE001 - any conversion failure is said in one line
            raise ExportError(f"the model cannot be converted to {format}: "
                              f"{type(e).__name__}: {_first_line(e)}") from e

    return write, outputs


@dataclass(frozen=True)
class _Spec:
    shape: tuple
    dtype: Any


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


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
        # XLA runs the artifact: XLA's own forms, traced as an export (no jaxdet CPU kernel)
        with exportable(pooling_as_slices=False, row_as_sum=False, nms_as_op=False):
            return jax.export.export(jax.jit(fresh_trace(fn)), platforms=platforms)(spec)
    except Exception as e:  # noqa: BLE001 - any lowering failure is reported in one line
        raise ExportError(f"the model cannot be lowered to StableHLO: {type(e).__name__}: "
                          f"{_first_line(e)}") from e


def export_onnx(fn, size: tuple[int, int], *, batch_size: int, input_type: str
                ) -> tuple[bytes, dict]:
    """(the ONNX model as a serialized ``ModelProto``, {output name: shape/dtype}) of a serving
    function for a fixed batch; its input is named ``input_type``, its outputs by their keys
    (in the function's flattened order: sorted). Raises ExportError (one line) without
    jax2onnx or when the conversion fails."""
    try:
        from jax2onnx import to_onnx
    except ImportError as e:
        raise ExportError("--format onnx needs jax2onnx, onnx and onnxruntime: run `pip "
                          "install 'jaxdet[onnx]'` (in a clone: make install-export)") from e
    from jaxdet.export import onnx_nms  # noqa: F401 - registers NMS -> NonMaxSuppression

    spec = _input_spec(size, batch_size, input_type)
    outputs = dict(sorted(jax.eval_shape(fn, spec).items()))
    try:
        with exportable(), trace.reference():  # ONNX Conv, not the CPU rewrites
            model = to_onnx(fresh_trace(fn), [spec], input_names=[input_type],
                            output_names=list(outputs), return_mode="proto")
    except Exception as e:  # noqa: BLE001 - any conversion failure is reported in one line
        raise ExportError(f"the model cannot be converted to ONNX: {type(e).__name__}: "
                          f"{_first_line(e)}") from e
    _drop_constant_identities(model.graph)
    return model.SerializeToString(), outputs


def _drop_constant_identities(graph) -> None:
    """Removes ``Identity`` nodes that copy an initializer (jax2onnx's ``stop_gradient`` of a
    weight), their readers reading the initializer itself: ONNX Runtime's graph optimizer
    rejects some such graphs ("... is not a graph input, initializer, or output of a previous
    node"; they load with optimizations off)."""
    initializers = {i.name for i in graph.initializer}
    outputs = {o.name for o in graph.output}
    alias = {n.output[0]: n.input[0] for n in graph.node
             if n.op_type == "Identity" and n.input[0] in initializers
             and n.output[0] not in outputs}
    if not alias:
        return
    kept = [n for n in graph.node if not (n.op_type == "Identity" and n.output[0] in alias)]
    del graph.node[:]
    graph.node.extend(kept)
    _rename_inputs(graph, alias)


def _rename_inputs(graph, alias: dict[str, str]) -> None:
    """Node inputs named in ``alias`` read the aliased name instead, subgraphs included."""
    for n in graph.node:
        for k, name in enumerate(n.input):
            if name in alias:
                n.input[k] = alias[name]
        for attribute in n.attribute:
            for sub in [attribute.g, *attribute.graphs]:
                if sub is not None and len(sub.node):
                    _rename_inputs(sub, alias)


def output_names_of(exported: jax.export.Exported) -> list[str]:
    """The output dict's keys in the order of ``exported.out_avals``."""
    tree = exported.out_tree
    index = jax.tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    return [name for name, _ in sorted(index.items(), key=lambda item: item[1])]


def _write(out_dir: Path, name: str, write: Callable[[Path], None], signature: dict
           ) -> ExportResult:
    """Writes the artifact ``name`` (by ``write(path)``) and signature.json into a temporary
    sibling folder, then moves it to ``out_dir``."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        write(tmp / name)
        (tmp / "signature.json").write_text(json.dumps(signature, indent=1))
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    artifact = out_dir / name
    size = (sum(f.stat().st_size for f in artifact.rglob("*") if f.is_file())
            if artifact.is_dir() else artifact.stat().st_size)
    return ExportResult(out_dir, artifact, size, signature)


__all__ = ["FORMATS", "TF_POSTPROCESS_FORMATS", "ExportError", "ExportResult",
           "artifact_input_size", "check_request", "export_serving_function",
           "export_tf_postprocess_model",
           "export_onnx", "export_stablehlo", "output_names_of"]
