"""jaxdet: object detection on JAX/XLA."""

__version__ = "0.1.0"
