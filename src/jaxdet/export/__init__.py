"""Export a trained model for serving (``jaxdet export``): see ``exporter`` and ``serving``."""

from jaxdet.export.exporter import FORMATS, ExportError, ExportResult

__all__ = ["FORMATS", "ExportError", "ExportResult"]
