"""The SSD family's box predictors: ``convolutional`` (SSD's, separate weights per level),
``weight_shared`` (RetinaNet's, weights shared across levels) and ``common`` (what both
use)."""
