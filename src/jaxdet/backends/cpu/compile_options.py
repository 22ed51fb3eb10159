"""XLA:CPU compile options for a train step or a predict call: which library runs the
convolutions.

XLA:CPU hands matrix multiplies, reductions and convolutions to YNNPACK by default. Eigen's
convolutions are faster for some models on the 2-core CPU machines (``benchmarks/`` with and
without these options, see benchmarks/LOG.md):

- **train steps of detectors**, the kernel gradients above all: RetinaNet-ResNet50 640 at batch
  2 took 4.3-4.6 s a step against 5.0-5.3 s, MobileNetV2 SSD 320 at batch 8 0.55-0.70 s against
  0.74-1.00 s. The 3D U-Net's small-channel 2D convolutions were slower with Eigen (87 vs 73 ms
  a demo step), so it keeps the default.
- **predict of ResNet backbones**: RetinaNet-ResNet50 640 took 729 ms against 781 ms at batch 1
  and 5.9 s against 6.7 s at batch 8. MobileNet SSD and EfficientDet predict were 1-13% slower
  with Eigen (depthwise and small convolutions), so they keep YNNPACK.

GPU and TPU compiles get no option.
"""

from __future__ import annotations

import os

import jax

YNN_FUSION_OPTION = "xla_cpu_experimental_ynn_fusion_type"
# YNNPACK keeps the matrix multiplies and the reductions; convolutions go to Eigen.
YNN_WITHOUT_CONVOLUTIONS = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"


def cpu_compiler_options(eigen_convolutions: bool) -> dict[str, str] | None:
    """``compiler_options`` for ``jax.jit``: on the CPU backend with ``eigen_convolutions``,
    the YNNPACK fusion types without convolutions; None elsewhere, or where the user's
    XLA_FLAGS already choose the YNNPACK fusion types."""
    if not eigen_convolutions or jax.default_backend() != "cpu":
        return None
    if YNN_FUSION_OPTION in os.environ.get("XLA_FLAGS", ""):
        return None
    return {YNN_FUSION_OPTION: YNN_WITHOUT_CONVOLUTIONS}
