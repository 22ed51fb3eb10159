"""Export a trained model for serving (``jaxdet export``): see ``exporter`` and ``serving``."""

from jaxdet.export.exporter import FORMATS, ExportError, ExportResult, export_model

__all__ = ["FORMATS", "ExportError", "ExportResult", "export_model"]
