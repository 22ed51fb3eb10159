"""Necks several families share: ``fpn`` (the TF OD API's Feature Pyramid Network) and
``identity`` (one backbone level passed through)."""
