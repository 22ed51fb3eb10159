"""What ``precision`` a job computes in, once its platform is known: ``bf16_on_tpu`` (a
converted pipeline.config's ``use_bfloat16: true``) means bfloat16 where TF applies it, when
training or evaluating on a TPU, and float32 everywhere else (CPU and GPU jobs; predict, load
and export on any platform, as TF's exporter)."""

from __future__ import annotations

import logging

from jaxdet.config.schema import Config

log = logging.getLogger("jaxdet")

BF16_JOBS = ("train", "eval")


def job_precision(precision: str, platform: str, job: str) -> str:
    """``precision`` as ``job`` (``train``, ``eval``, ``predict``, ``export``) computes it on
    ``platform`` (``jax.default_backend()``: ``cpu``, ``gpu``/``cuda``/``rocm``, ``tpu``);
    ``fp32``, ``bf16`` and ``fp16`` are what they say everywhere."""
    if precision != "bf16_on_tpu":
        return precision
    return "bf16" if platform == "tpu" and job in BF16_JOBS else "fp32"


def resolve_precision(config: Config, platform: str, job: str) -> Config:
    """``config`` with its precision as ``job`` computes it on ``platform`` (see
    :func:`job_precision`); says once in the log when ``use_bfloat16`` does not apply."""
    resolved = job_precision(config.precision, platform, job)
    if resolved == config.precision:
        return config
    if resolved == "fp32" and job in BF16_JOBS:
        log.info("use_bfloat16 (precision: bf16_on_tpu) applies on TPUs only, as in TF: this %s "
                 "runs in float32 on %s; --set precision=bf16 computes in bfloat16 here (or "
                 "precision=fp16, float16 with loss scaling)", job, platform)
    return config.model_copy(update={"precision": resolved})


__all__ = ["job_precision", "resolve_precision"]
