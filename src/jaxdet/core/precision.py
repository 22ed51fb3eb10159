"""The dtypes a network computes in, by the config's ``precision`` name."""

from __future__ import annotations

import jax.numpy as jnp

# config.precision -> the dtype the network computes in (parameters stay float32)
COMPUTE_DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}

__all__ = ["COMPUTE_DTYPES"]
