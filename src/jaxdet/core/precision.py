"""The dtypes a network computes in, by the config's ``precision`` name."""

from __future__ import annotations

import jax.numpy as jnp

# config.precision -> the dtype the network computes in (parameters stay float32)
COMPUTE_DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}

# precisions that depend on where and what a job runs; outside a TPU training or evaluation
# job (which resolve them first) they compute as the named one
UNRESOLVED = {"bf16_on_tpu": "fp32"}


def compute_dtype(precision: str):
    """The dtype a network computes in for ``config.precision`` (``bf16_on_tpu``, TF's
    ``use_bfloat16``, is float32 unless a TPU training or evaluation job resolved it)."""
    return COMPUTE_DTYPES[UNRESOLVED.get(precision, precision)]


__all__ = ["COMPUTE_DTYPES", "UNRESOLVED", "compute_dtype"]
