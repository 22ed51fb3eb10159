"""TF SavedModel and TFLite artifacts of a serving function (``make install-tf-export``).

Both go through ``jax2tf.convert``: the serving function becomes one ``XlaCallModule`` op
holding its StableHLO (weights inside) in a ``tf.function`` whose signature is the TF OD API
exporter's (input ``input_tensor``, outputs ``num_detections``, ``detection_boxes``, ...).

* ``saved_model``: for TF Serving and ``tf.saved_model.load`` on CPU, GPU or TPU (the module
  is lowered for all three, like the StableHLO artifact); any batch unless fixed (a
  ``tf.map_fn`` over images of a one-image module then), and for
  ``encoded_image_string_tensor`` a string [B] of JPEG/PNG bytes decoded in the graph
  (``tf.io.decode_image``; every image must decode to the artifact's input size).
* ``tflite``: the SavedModel's function converted by ``tf.lite.TFLiteConverter`` with the
  TFLite builtin op set only (no Flex ops, so the plain LiteRT interpreter runs it); a fixed
  batch (default 1); uint8 or float32 input (TFLite has no image decoder).

TensorFlow is imported here only, when one of these formats is asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import jax
import numpy as np

from jaxdet.backends import trace
from jaxdet.core.portable import exportable, fresh_trace

INPUT_NAME = "input_tensor"  # the TF OD API exporter's serving input name
SAVED_MODEL_PLATFORMS = ("cpu", "cuda", "tpu")  # TF runs the XlaCallModule on any of them
TF_HINT = ("needs TensorFlow: run `make install-tf-export` and use .venv-tf/bin/jaxdet (or "
           "`pip install 'jaxdet[tf-export]'`)")


class TFUnavailable(ImportError):
    """TensorFlow (or its jax2tf bridge) cannot be imported."""


def import_tf():
    """(tensorflow, jax2tf), or TFUnavailable naming the install command."""
    try:
        import tensorflow as tf
        from jax.experimental import jax2tf
    except ImportError as e:
        raise TFUnavailable(TF_HINT) from e
    return tf, jax2tf


@contextlib.contextmanager
def stablehlo_for_tf() -> Iterator[None]:
    """Within the block, ``jax.export`` writes StableHLO at least 12 weeks old.

    jax serializes for consumers at most 4 weeks older than itself; TF 2.21's XlaCallModule
    reads StableHLO 1.13.x, which jax 0.10 only writes when asked for the 12-week window (the
    ops jaxdet uses all exist there). jax has no public switch for it, hence the patch."""
    from jax._src.export import _export

    hlo = _export.hlo
    original = hlo.get_version_from_compatibility_requirement
    hlo.get_version_from_compatibility_requirement = (
        lambda _: original(hlo.StablehloCompatibilityRequirement.WEEK_12))
    try:
        yield
    finally:
        hlo.get_version_from_compatibility_requirement = original


def _tf_function(fn: Callable, size: tuple[int, int], batch_size: int | None,
                 input_type: str, *, platforms: tuple[str, ...], tf_convolutions: bool):
    """The concrete ``tf.function`` of ``fn`` for TF: images (or encoded strings) [B, ...] in,
    the output dict out, its XlaCallModule lowered for ``platforms``.

    ``batch_size`` None (any batch): the module is written for one image and ``tf.map_fn``
    runs it per image. A batch-polymorphic module would need ``top_k`` without its StableHLO
    composite, whose shapes TF cannot refine, and a sort in its place costs EfficientDet's
    49k anchors x 90 classes 8x the whole network. Traced here, so the forms in effect apply;
    ``tf_convolutions``: plain convolutions (which the TFLite converter maps onto its kernels)
    instead of jaxdet's XLA:CPU rewrites of them (which XLA, running the SavedModel, runs
    several times faster)."""
    tf, jax2tf = import_tf()
    height, width = size
    dtype = tf.float32 if input_type == "float_image_tensor" else tf.uint8
    converted = jax2tf.convert(fresh_trace(fn), with_gradient=False,
                               native_serialization_platforms=platforms)
    encoded = input_type == "encoded_image_string_tensor"

    def decode(blob):
        image = tf.io.decode_image(blob, channels=3, expand_animations=False)
        return tf.ensure_shape(image, [height, width, 3])

    def one(item):  # one image (or its bytes) -> the outputs without the batch axis
        image = decode(item) if encoded else item
        return {k: v[0] for k, v in converted(image[None]).items()}

    if encoded:
        spec = tf.TensorSpec([batch_size], tf.string, name=INPUT_NAME)
    else:
        spec = tf.TensorSpec([batch_size, height, width, 3], dtype, name=INPUT_NAME)

    @tf.function(input_signature=[spec], autograph=False)
    def serve(inputs):
        if batch_size is None:
            shapes = jax.eval_shape(fn, jax.ShapeDtypeStruct(
                (1, height, width, 3), np.float32 if dtype == tf.float32 else np.uint8))
            return tf.map_fn(one, inputs, fn_output_signature={
                k: tf.TensorSpec(v.shape[1:], v.dtype) for k, v in shapes.items()})
        images = tf.map_fn(decode, inputs, fn_output_signature=tf.TensorSpec(
            [height, width, 3], tf.uint8)) if encoded else inputs
        return converted(images)

    convolutions = trace.reference() if tf_convolutions else contextlib.nullcontext()
    with stablehlo_for_tf(), convolutions:
        return serve.get_concrete_function()


def write_saved_model(fn: Callable, path: Path, size: tuple[int, int], *,
                      batch_size: int | None, input_type: str) -> None:
    """Writes the SavedModel of ``fn`` to the folder ``path`` (signature ``serving_default``;
    any batch when ``batch_size`` is None)."""

    tf, _ = import_tf()
    # XLA runs the module: its own forms, except that NMS stays a loop (no TF lowering of ours)
    with exportable(pooling_as_slices=False, row_as_sum=False, nms_as_op=False):
        concrete = _tf_function(fn, size, batch_size, input_type,
                                platforms=SAVED_MODEL_PLATFORMS, tf_convolutions=False)
    module = tf.Module()
    module.serve = concrete
    tf.saved_model.save(module, str(path), signatures={"serving_default": concrete})


def _tflite_function(fn: Callable, size: tuple[int, int], batch_size: int, input_type: str):
    """The concrete ``tf.function`` the TFLite converter takes: plain convolutions, NMS per
    image as a loop, lowered for the CPU."""
    with exportable(pooling_as_slices=False, row_as_sum=False, nms_as_op=False,
                    nms_per_image=True):
        return _tf_function(fn, size, batch_size, input_type, platforms=("cpu",),
                            tf_convolutions=True)


def tflite_bytes(fn: Callable, size: tuple[int, int], *, batch_size: int,
                 input_type: str) -> bytes:
    """The TFLite flatbuffer of ``fn`` for a fixed batch, TFLite builtin ops only."""

    tf, _ = import_tf()
    concrete = _tflite_function(fn, size, batch_size, input_type)
    module = tf.Module()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


def write_tflite_saved_model(fn: Callable, path: Path, size: tuple[int, int], *,
                             batch_size: int, input_type: str) -> None:
    """Writes the SavedModel that TF's TFLite converter turns into :func:`tflite_bytes`'s
    model (``tf.lite.TFLiteConverter.from_saved_model``, or ``tflite_convert
    --saved_model_dir``), signature ``serving_default``; what TF's
    ``export_tflite_graph_tf2.py`` writes for the converter."""
    tf, _ = import_tf()
    concrete = _tflite_function(fn, size, batch_size, input_type)
    module = tf.Module()
    module.serve = concrete
    tf.saved_model.save(module, str(path), signatures={"serving_default": concrete})


__all__ = ["INPUT_NAME", "SAVED_MODEL_PLATFORMS", "TFUnavailable", "import_tf",
           "stablehlo_for_tf", "tflite_bytes", "write_saved_model", "write_tflite_saved_model"]
