"""Per-parameter settings: how a parameter is initialized (``train.initializers``) and how
much L2 weight decay it gets (``train.optimizer.weight_decay_rules``).

Both are ordered lists of rules. A rule's ``params`` is a regular expression searched
(``re.search``) in a parameter's path, e.g. ``backbone/blocks/3/0/conv_dw/kernel`` (the paths
``jaxdet summary`` and ``train.freeze_variables`` use); the first rule that matches a
parameter decides. ``depthwise`` narrows a rule to the kernels of depthwise convolutions
(``true``) or to every other parameter (``false``). A rule that matches no parameter is an
error, so a typo cannot pass silently. A converted TF OD API pipeline.config fills both
lists with what TF does for its layers (see the TF guide).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from jaxdet.config.schema_base import Strict


class TruncatedNormalInitializerConfig(Strict):
    """Normal draws redrawn until within two standard deviations of ``mean`` (not rescaled:
    the result's deviation is about 0.88 ``stddev``), as TF's ``truncated_normal_initializer``."""

    name: Literal["truncated_normal"] = "truncated_normal"
    mean: float = 0.0
    stddev: float = Field(gt=0.0)


class RandomNormalInitializerConfig(Strict):
    """Untruncated normal draws, as TF's ``random_normal_initializer``."""

    name: Literal["random_normal"] = "random_normal"
    mean: float = 0.0
    stddev: float = Field(gt=0.0)


class VarianceScalingInitializerConfig(Strict):
    """Variance ``factor / n`` with ``n`` the kernel's fan (``mode``), as TF's
    ``variance_scaling_initializer``; ``truncated_normal`` is rescaled so the variance holds.
    Fans are counted as TF counts them, a depthwise kernel included."""

    name: Literal["variance_scaling"] = "variance_scaling"
    factor: float = Field(2.0, gt=0.0)
    mode: Literal["fan_in", "fan_out", "fan_avg"] = "fan_in"
    distribution: Literal["truncated_normal", "normal", "uniform"] = "truncated_normal"


class GlorotUniformInitializerConfig(Strict):
    """Uniform in ``±sqrt(6 / (fan_in + fan_out))``: Keras's default kernel initializer."""

    name: Literal["glorot_uniform"] = "glorot_uniform"


InitializerConfig = Annotated[
    TruncatedNormalInitializerConfig | RandomNormalInitializerConfig
    | VarianceScalingInitializerConfig | GlorotUniformInitializerConfig,
    Field(discriminator="name")]


class InitializerRule(Strict):
    """One rule of ``train.initializers``: the parameters it matches are drawn with
    ``initializer`` instead of the model's own initializer. ``params`` is a regular
    expression searched in each parameter's path (e.g. ``backbone/blocks/3/0/conv_dw/kernel``,
    the paths ``train.freeze_variables`` sees); ``depthwise: true`` narrows the rule to
    depthwise convolution kernels, ``false`` to every other parameter. The first rule that
    matches a parameter decides; a rule that matches no parameter is an error. A converted TF
    OD API pipeline.config fills this list with TF's own initializer of each layer."""

    params: str = Field(min_length=1)
    depthwise: bool | None = None
    initializer: InitializerConfig


class WeightDecayRule(Strict):
    """One rule of ``train.optimizer.weight_decay_rules``: the parameters it matches get L2
    weight decay ``weight`` (their gradient gains ``weight * param``; 0: none) instead of
    ``train.optimizer.weight_decay``. ``params`` and ``depthwise`` match as in
    ``train.initializers``; the first matching rule decides. A converted TF OD API
    pipeline.config fills this list with TF's own L2 regularizer of each layer."""

    params: str = Field(min_length=1)
    depthwise: bool | None = None
    weight: float = Field(ge=0.0)
