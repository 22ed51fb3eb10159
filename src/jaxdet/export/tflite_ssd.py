"""TF's TFLite contract for SSD models: the file that TF's ``export_tflite_graph_tf2.py`` and
TF's converter make, from a jaxdet model (``make install-tf-export``).

What an app built on TF's file reads, and what :func:`tflite_bytes` writes:

* input ``input`` (tensor ``serving_default_input:0``): float32 [1, H, W, 3], the
  *normalized* image at the model's size (the network's own input: no resizing or
  normalization inside, as TF's file);
* the network, then TF's ``TFLite_Detection_PostProcess`` custom operation (built into the
  TFLite interpreter): it decodes the raw box encodings against the anchors, a constant of the
  file, and runs TF's NMS (its fast NMS, or per class with ``use_regular_nms``);
* the operation's four outputs as TF's converted file lists them: ``detection_scores`` [1, D],
  ``detection_boxes`` [1, D, 4] (ymin, xmin, ymax, xmax, normalized, not clipped),
  ``num_detections`` [1], ``detection_classes`` [1, D] (0-based class indices); the signature
  ``serving_default`` names them ``output_0`` (num) ... ``output_3`` (boxes), as TF's.

TF's exporter ends its graph in a placeholder function that TF's converter replaces by the
operation; the converter does not do that after a jax2tf module (it folds the placeholder away),
so the network is converted alone (:func:`network_tflite`: TFLite builtin operations, float32
or, with ``quantize="int8"``, TF's post-training integer quantization from a representative
dataset, with the settings of TF's mobile guide) and the operation is then added to the file
(:func:`append_postprocess`) with the settings TF's exporter gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from jaxdet.backends import trace
from jaxdet.core.portable import exportable, fresh_trace
from jaxdet.export.tf_formats import import_tf, stablehlo_for_tf

POSTPROCESS_OP = "TFLite_Detection_PostProcess"
INPUT_NAME = "input"  # TF's export_tflite_graph_tf2 input
QUANTIZATIONS = ("int8",)
# the operation's outputs (in its order) -> (TF's signature output, TF's tensor name)
_OUTPUTS = {"detection_boxes": ("output_3", "StatefulPartitionedCall:3"),
            "detection_classes": ("output_2", "StatefulPartitionedCall:2"),
            "detection_scores": ("output_1", "StatefulPartitionedCall:1"),
            "num_detections": ("output_0", "StatefulPartitionedCall:0")}
# the order in which TF's converted file lists its outputs
OUTPUT_NAMES = ("detection_scores", "detection_boxes", "num_detections", "detection_classes")


def postprocess_options(attributes: dict, *, max_detections: int,
                        use_regular_nms: bool) -> dict:
    """The operation's settings as TF's exporter gives them (one class per detection; the
    operation's own default of 100 detections per class for its regular NMS), from
    ``SSDTask.detection_postprocess_attributes()``; floats as float32."""
    y, x, h, w = (float(np.float32(v)) for v in attributes["scales"])
    return {"max_detections": int(max_detections), "max_classes_per_detection": 1,
            "use_regular_nms": int(bool(use_regular_nms)),
            "nms_score_threshold": float(np.float32(attributes["score_threshold"])),
            "nms_iou_threshold": float(np.float32(attributes["iou_threshold"])),
            "num_classes": int(attributes["num_classes"]),
            "y_scale": y, "x_scale": x, "h_scale": h, "w_scale": w}


def _flexbuffer_map(options: dict) -> bytes:
    """``options`` as a FlexBuffer map (ints as ints, floats as float32)."""
    from flatbuffers import flexbuffers

    fbb = flexbuffers.Builder()
    with fbb.Map():
        for key in sorted(options):
            value = options[key]
            if isinstance(value, float):
                fbb.Float(key, value, 4)
            else:
                fbb.Int(key, value)
    return bytes(fbb.Finish())


def network_function(task: Any, params: Any, batch_stats: Any, *, for_int8: bool = False):
    """The concrete ``tf.function`` of the network alone: ``input`` f32 [1, H, W, 3]
    (normalized) -> (box encodings [1, A, 4], class predictions [1, A, K]) as one
    XlaCallModule (plain convolutions, lowered for the CPU). ``for_int8``: max pooling as
    strided slices and maxima, for a padded max pooling quantized to int8 (TF's converter
    makes it an int8 PADV2 with int64 paddings) crashes the TFLite interpreter."""
    tf, jax2tf = import_tf()
    height, width = task.input_size

    def raw(images):
        return task.detection_postprocess_inputs(params, batch_stats, images)

    converted = jax2tf.convert(fresh_trace(raw), with_gradient=False,
                               native_serialization_platforms=("cpu",))

    @tf.function(input_signature=[tf.TensorSpec([1, height, width, 3], tf.float32,
                                                name=INPUT_NAME)], autograph=False)
    def network(image):
        box_encodings, class_predictions = converted(image)
        return box_encodings, class_predictions

    with exportable(pooling_as_slices=for_int8, row_as_sum=False, nms_as_op=False,
                    nms_per_image=True), stablehlo_for_tf(), trace.reference():
        return network.get_concrete_function()


def network_tflite(concrete, *, quantize: str | None = None,
                   representative: Callable[[], Iterable[np.ndarray]] | None = None) -> bytes:
    """:func:`network_function` through TF's converter, TFLite builtin operations only; with
    ``quantize="int8"``, integer quantization calibrated on ``representative()``'s images (each
    f32 [1, H, W, 3], normalized), with the converter settings of TF's mobile guide (int8
    operations where TFLite has them, float32 input and outputs)."""
    tf, _ = import_tf()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    if quantize is None:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        return converter.convert()
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize {quantize!r}: allowed {', '.join(QUANTIZATIONS)}")
    if representative is None:
        raise ValueError("int8 quantization needs a representative dataset")
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                           tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.representative_dataset = lambda: ([np.asarray(x, np.float32)]
                                                for x in representative())
    return converter.convert()


def append_postprocess(network: bytes, anchors: np.ndarray, options: dict) -> bytes:
    """``network`` (a TFLite file whose signature's ``output_0`` / ``output_1`` are the box
    encodings and class predictions) with TF's post-processing operation after it: ``anchors
    [A, 4]`` (y_center, x_center, height, width) a constant of the file, ``options`` its
    settings (:func:`postprocess_options`); its outputs become the file's, named and ordered
    as in TF's file."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(network, 0))
    graph = model.subgraphs[0]
    (signature,) = model.signatureDefs
    by_name = {t.name.decode() if isinstance(t.name, bytes) else t.name: t.tensorIndex
               for t in signature.outputs}
    encodings, predictions = by_name["output_0"], by_name["output_1"]
    graph.tensors[encodings].name = b"raw_outputs/box_encodings"
    graph.tensors[predictions].name = b"raw_outputs/class_predictions"

    def tensor(name: str, shape: list[int], data: bytes = b"") -> int:
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(data, np.uint8) if data else None
        model.buffers.append(buffer)
        t = schema.TensorT()
        t.shape = np.asarray(shape, np.int32)
        t.type = schema.TensorType.FLOAT32
        t.buffer = len(model.buffers) - 1
        t.name = name.encode()
        graph.tensors.append(t)
        return len(graph.tensors) - 1

    anchors = np.ascontiguousarray(anchors, np.float32)
    anchor_index = tensor("anchors", list(anchors.shape), anchors.tobytes())
    d = int(options["max_detections"])
    shapes = {"detection_boxes": [1, d, 4], "detection_classes": [1, d],
              "detection_scores": [1, d], "num_detections": [1]}
    outputs = {name: tensor(_OUTPUTS[name][1], shapes[name]) for name in _OUTPUTS}

    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode = POSTPROCESS_OP.encode()
    code.version = 1
    model.operatorCodes.append(code)
    op = schema.OperatorT()
    op.opcodeIndex = len(model.operatorCodes) - 1
    op.inputs = np.asarray([encodings, predictions, anchor_index], np.int32)
    op.outputs = np.asarray([outputs[name] for name in _OUTPUTS], np.int32)
    op.customOptions = np.frombuffer(_flexbuffer_map(options), np.uint8)
    op.customOptionsFormat = schema.CustomOptionsFormat.FLEXBUFFERS
    graph.operators.append(op)
    graph.outputs = np.asarray([outputs[name] for name in OUTPUT_NAMES], np.int32)

    signature.outputs = []
    for name in sorted(_OUTPUTS, key=lambda n: _OUTPUTS[n][0]):
        entry = schema.TensorMapT()
        entry.name = _OUTPUTS[name][0].encode()
        entry.tensorIndex = outputs[name]
        signature.outputs.append(entry)

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def tflite_bytes(task: Any, params: Any, batch_stats: Any, *, max_detections: int,
                 use_regular_nms: bool = False, quantize: str | None = None,
                 representative: Callable[[], Iterable[np.ndarray]] | None = None) -> bytes:
    """TF's TFLite file of an SSD-family ``task`` (see the module docstring)."""
    attributes = task.detection_postprocess_attributes()
    network = network_tflite(network_function(task, params, batch_stats,
                                              for_int8=quantize is not None),
                             quantize=quantize, representative=representative)
    return append_postprocess(network, attributes["anchors"], postprocess_options(
        attributes, max_detections=max_detections, use_regular_nms=use_regular_nms))


__all__ = ["INPUT_NAME", "OUTPUT_NAMES", "POSTPROCESS_OP", "QUANTIZATIONS",
           "append_postprocess", "network_function", "network_tflite", "postprocess_options",
           "tflite_bytes"]
