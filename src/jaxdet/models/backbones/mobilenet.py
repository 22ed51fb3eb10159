"""MobileNet V1 and V2 backbones (ReLU6), laid out like timm's ``mobilenetv1_100`` and
``mobilenetv2_100``.

Names follow timm so the torch name maps take its ``state_dict``
one-to-one: ``conv_stem, bn1, blocks[i][j], conv_head, bn2`` where a block is either a
depthwise-separable block (``conv_dw, bn1, conv_pw, bn2``) or an inverted residual
(``conv_pw, bn1, conv_dw, bn2, conv_pwl, bn3``).

``depth_multiplier`` scales every channel count by the TF slim / timm rule: round to a
multiple of 8, never below ``min_depth``, never more than 10% down. The MobileNetV2 head
conv stays at ``head_channels`` (1280) when the multiplier is below 1, as Keras applications
and timm do (``head_scaling="above_1"``); the TF OD API's Keras MobileNetV2 does the opposite
(``"below_1"``: its layer override of ``Conv_1``). Padding defaults to PyTorch-style
symmetric (matching timm weights); pass ``padding="same"`` for TF ``SAME`` semantics.
"""

from __future__ import annotations

from typing import Literal

import jax
from flax import nnx

from jaxdet.models import remat
from jaxdet.models.layers import BatchNormParams, Padding, conv, make_divisible
from jaxdet.models.layers import batch_norm as make_batch_norm

# (channels, repeats, first stride) per stage; stem is 32 channels, stride 2.
V1_STAGES = ((64, 1, 1), (128, 2, 2), (256, 2, 2), (512, 6, 2), (1024, 2, 2))
# (expansion, channels, repeats, first stride); stage 0 is a depthwise-separable block.
V2_STAGES = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)
# Which stage (index into ``blocks``) ends each level.
V1_LEVEL_STAGE = {2: 1, 3: 2, 4: 3, 5: 4}
V2_LEVEL_STAGE = {2: 1, 3: 2, 4: 4}  # level 5 is the head conv


class DepthwiseSeparable(nnx.Module):
    """depthwise 3x3 -> BN -> ReLU6 -> pointwise 1x1 -> BN (-> ReLU6 if ``pw_act``);
    residual when shapes allow and ``skip``. timm ``DepthwiseSeparableConv``."""

    def __init__(self, in_ch, out_ch, stride, *, pw_act, skip, bn_params, padding, dtype, rngs):
        self.conv_dw = conv(in_ch, in_ch, 3, stride, groups=in_ch, padding=padding,
                            dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(in_ch, bn_params, dtype, rngs)
        self.conv_pw = conv(in_ch, out_ch, 1, dtype=dtype, rngs=rngs)
        self.bn2 = make_batch_norm(out_ch, bn_params, dtype, rngs)
        self.pw_act = pw_act
        self.has_skip = skip and stride == 1 and in_ch == out_ch

    def __call__(self, x: jax.Array) -> jax.Array:
        y = jax.nn.relu6(self.bn1(self.conv_dw(x)))
        y = self.bn2(self.conv_pw(y))
        if self.pw_act:
            y = jax.nn.relu6(y)
        return y + x if self.has_skip else y


class InvertedResidual(nnx.Module):
    """1x1 expand -> BN -> ReLU6 -> depthwise 3x3 -> BN -> ReLU6 -> 1x1 linear -> BN, with a
    residual when stride 1 and channels match. timm ``InvertedResidual``."""

    def __init__(self, in_ch, out_ch, stride, expansion, *, bn_params, padding, dtype, rngs):
        mid = make_divisible(in_ch * expansion)
        self.conv_pw = conv(in_ch, mid, 1, dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(mid, bn_params, dtype, rngs)
        self.conv_dw = conv(mid, mid, 3, stride, groups=mid, padding=padding,
                            dtype=dtype, rngs=rngs)
        self.bn2 = make_batch_norm(mid, bn_params, dtype, rngs)
        self.conv_pwl = conv(mid, out_ch, 1, dtype=dtype, rngs=rngs)
        self.bn3 = make_batch_norm(out_ch, bn_params, dtype, rngs)
        self.expansion_channels = mid
        self.has_skip = stride == 1 and in_ch == out_ch

    def expand(self, x: jax.Array) -> jax.Array:
        """The expansion output (TF's ``layer_N/expansion_output``)."""
        return jax.nn.relu6(self.bn1(self.conv_pw(x)))

    def finish(self, expanded: jax.Array, x: jax.Array) -> jax.Array:
        y = jax.nn.relu6(self.bn2(self.conv_dw(expanded)))
        y = self.bn3(self.conv_pwl(y))
        return y + x if self.has_skip else y

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.finish(self.expand(x), x)


class MobileNetV1(nnx.Module):
    """MobileNetV1 (timm ``mobilenetv1_100`` names; no head conv).

    Levels (TF slim end points): 2: ``Conv2d_3_pointwise`` (stride 4), 3:
    ``Conv2d_5_pointwise`` (stride 8), 4: ``Conv2d_11_pointwise`` (stride 16), 5:
    ``Conv2d_13_pointwise`` (stride 32).
    """

    def __init__(
        self,
        depth_multiplier: float = 1.0,
        min_depth: int = 8,
        *,
        batch_norm: BatchNormParams,
        padding: Padding = "symmetric",
        dtype=None,
        rngs: nnx.Rngs,
    ):
        ch = lambda c: make_divisible(c * depth_multiplier, 8, min_depth)  # noqa: E731
        stem = ch(32)
        self.conv_stem = conv(3, stem, 3, 2, padding=padding, dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(stem, batch_norm, dtype, rngs)
        in_ch = stem
        stages = []
        for c, n, s in V1_STAGES:
            out_ch = ch(c)
            blocks = []
            for j in range(n):
                blocks.append(DepthwiseSeparable(
                    in_ch, out_ch, s if j == 0 else 1, pw_act=True, skip=False,
                    bn_params=batch_norm, padding=padding, dtype=dtype, rngs=rngs))
                in_ch = out_ch
            stages.append(nnx.List(blocks))
        self.blocks = nnx.List(stages)
        self.out_channels: dict[int, int] = {
            level: ch(V1_STAGES[i][0]) for level, i in V1_LEVEL_STAGE.items()
        }

    def __call__(self, x: jax.Array) -> dict[int, jax.Array]:
        x = jax.nn.relu6(self.bn1(self.conv_stem(x)))
        stage_to_level = {i: level for level, i in V1_LEVEL_STAGE.items()}
        features = {}
        for i, stage in enumerate(self.blocks):
            x = remat.run_blocks(stage, x)
            if i in stage_to_level:
                features[stage_to_level[i]] = x
        return features

    def blocks_by_level(self) -> dict[int, list[nnx.Module]]:
        """The blocks leading to each level (stage 0 counts towards level 2)."""
        return remat.blocks_by_level(self.blocks, V1_LEVEL_STAGE)


class MobileNetV2(nnx.Module):
    """MobileNetV2 (timm ``mobilenetv2_100`` names).

    Levels: 2: end of the 24-ch stage (stride 4, TF ``layer_4``), 3: end of the 32-ch stage
    (stride 8, ``layer_7``), 4: end of the 96-ch stage (stride 16, ``layer_14``), 5: the final
    1x1 conv + BN + ReLU6 (stride 32, ``layer_19``, ``head_channels`` wide).

    ``level4_from_expansion=True`` makes level 4 the expansion output of the first stride-32
    block (576 channels at multiplier 1; TF ``layer_15/expansion_output``), which the TF OD
    API's ``ssd_mobilenet_v2`` uses. ``level4_stage=3`` makes level 4 the end of the 64-channel
    stage instead (still stride 16; Keras ``block_9_add``), which the TF OD API's CenterNet
    MobileNetV2-FPN reads.

    ``head_scaling``: when the multiplier scales the head conv's ``head_channels``:
    ``"above_1"`` (Keras applications, timm) or ``"below_1"`` (the TF OD API's Keras
    MobileNetV2, whose layer override keeps 1280 at and above 1).
    """

    def __init__(
        self,
        depth_multiplier: float = 1.0,
        min_depth: int = 8,
        level4_from_expansion: bool = False,
        *,
        batch_norm: BatchNormParams,
        head_channels: int = 1280,
        level4_stage: Literal[3, 4] = 4,
        head_scaling: Literal["above_1", "below_1"] = "above_1",
        padding: Padding = "symmetric",
        dtype=None,
        rngs: nnx.Rngs,
    ):
        ch = lambda c: make_divisible(c * depth_multiplier, 8, min_depth)  # noqa: E731
        stem = ch(32)
        self.conv_stem = conv(3, stem, 3, 2, padding=padding, dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(stem, batch_norm, dtype, rngs)
        in_ch = stem
        stages = []
        stage_out = []
        for i, (t, c, n, s) in enumerate(V2_STAGES):
            out_ch = ch(c)
            blocks = []
            for j in range(n):
                stride = s if j == 0 else 1
                if i == 0:
                    blocks.append(DepthwiseSeparable(
                        in_ch, out_ch, stride, pw_act=False, skip=True, bn_params=batch_norm,
                        padding=padding, dtype=dtype, rngs=rngs))
                else:
                    blocks.append(InvertedResidual(
                        in_ch, out_ch, stride, t, bn_params=batch_norm, padding=padding,
                        dtype=dtype, rngs=rngs))
                in_ch = out_ch
            stages.append(nnx.List(blocks))
            stage_out.append(out_ch)
        self.blocks = nnx.List(stages)
        if level4_stage not in (3, 4) or (level4_stage == 3 and level4_from_expansion):
            raise ValueError(f"level4_stage must be 3 or 4 (4 with level4_from_expansion), got "
                             f"{level4_stage}")
        scale_head = (depth_multiplier > 1.0 if head_scaling == "above_1"
                      else depth_multiplier < 1.0)
        head = ch(head_channels) if scale_head else head_channels
        self.conv_head = conv(in_ch, head, 1, dtype=dtype, rngs=rngs)
        self.bn2 = make_batch_norm(head, batch_norm, dtype, rngs)
        self.level4_from_expansion = level4_from_expansion
        self.level_stage = {**V2_LEVEL_STAGE, 4: level4_stage}
        self.out_channels: dict[int, int] = {
            level: stage_out[i] for level, i in self.level_stage.items()
        }
        if level4_from_expansion:
            self.out_channels[4] = self.blocks[5][0].expansion_channels
        self.out_channels[5] = head

    def __call__(self, x: jax.Array) -> dict[int, jax.Array]:
        x = jax.nn.relu6(self.bn1(self.conv_stem(x)))
        features = {}
        for i, stage in enumerate(self.blocks):
            if i == 5 and self.level4_from_expansion:
                first = stage[0]
                expanded = first.expand(x)
                features[4] = expanded
                x = remat.run_blocks(stage[1:], first.finish(expanded, x))
            else:
                x = remat.run_blocks(stage, x)
            if i == 1:
                features[2] = x
            elif i == 2:
                features[3] = x
            elif i == self.level_stage[4] and not self.level4_from_expansion:
                features[4] = x
        features[5] = jax.nn.relu6(self.bn2(self.conv_head(x)))
        return features

    def blocks_by_level(self) -> dict[int, list[nnx.Module]]:
        """The blocks leading to each level (stage 0 counts towards level 2, the stride-32
        blocks before the head conv to level 5). With ``level4_from_expansion`` the split
        block (first of stage 5) is never recomputed."""
        return remat.blocks_by_level(self.blocks, self.level_stage)
