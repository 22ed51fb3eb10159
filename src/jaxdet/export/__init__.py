"""Export a trained model for serving (``jaxdet export``): ``exporter`` (the artifact writers:
StableHLO, ONNX), ``serving`` (the whole detector as one function of raw images),
``onnx_nms`` (greedy NMS as ONNX's ``NonMaxSuppression``), ``tf_formats`` (TF SavedModel and
TFLite), ``tflite_ssd`` (TF's own SSD TFLite file, its post-processing operation, int8),
``runtimes`` (an artifact run in its own runtime and compared with ``jaxdet
predict``)."""

from jaxdet.export.exporter import FORMATS, ExportError, ExportResult

__all__ = ["FORMATS", "ExportError", "ExportResult"]
