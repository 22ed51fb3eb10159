"""XLA:CPU compile options for a train step: which library runs the convolutions.

XLA:CPU hands matrix multiplies, reductions and convolutions to YNNPACK by default. For the
detectors' train steps, Eigen's convolutions were faster on the 2-core CPU machine (the
convolutions' kernel gradients above all): RetinaNet-ResNet50 640 at batch 2 took 4.3-4.6 s a
step against 5.0-5.3 s, MobileNetV2 SSD 320 at batch 8 0.55-0.70 s against 0.74-1.00 s
(``benchmarks/train_throughput.py`` with and without these options, see BENCHMARKS.md). The 3D
U-Net's small-channel 2D convolutions were slower with Eigen (87 vs 73 ms a demo step), so it
keeps the default. GPU and TPU compiles get no option.
"""

from __future__ import annotations

import os

import jax

YNN_FUSION_OPTION = "xla_cpu_experimental_ynn_fusion_type"
# YNNPACK keeps the matrix multiplies and the reductions; convolutions go to Eigen.
YNN_WITHOUT_CONVOLUTIONS = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"


def train_compiler_options(eigen_convolutions: bool) -> dict[str, str] | None:
    """``compiler_options`` for ``jax.jit`` of a train step: on the CPU backend with
    ``eigen_convolutions``, the YNNPACK fusion types without convolutions; None elsewhere, or
    where the user's XLA_FLAGS already choose the YNNPACK fusion types."""
    if not eigen_convolutions or jax.default_backend() != "cpu":
        return None
    if YNN_FUSION_OPTION in os.environ.get("XLA_FLAGS", ""):
        return None
    return {YNN_FUSION_OPTION: YNN_WITHOUT_CONVOLUTIONS}
