"""Per-parameter initializer rules (``train.initializers``): which parameters a rule draws, with
which distribution (TF's: truncated normal not rescaled, variance scaling with TF's fans of a
depthwise kernel), the first rule winning, and a rule that matches nothing refused."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from jaxdet.models.initializers import InitSpec, draw, tf_fans
from jaxdet.models.layers import conv, depthwise_conv
from jaxdet.models.param_rules import (
    ParamPattern,
    apply_initializer_rules,
    is_depthwise_kernel,
)


class Tiny(nnx.Module):
    def __init__(self):
        rngs = nnx.Rngs(0)
        self.stem = conv(3, 64, 3, use_bias=True, rngs=rngs)
        self.dw = depthwise_conv(64, 3, rngs=rngs)
        self.pw = conv(64, 128, 1, rngs=rngs)


def _params(model) -> dict[str, np.ndarray]:
    return {"/".join(map(str, path)): np.asarray(p.value)
            for path, p in nnx.iter_graph(model) if isinstance(p, nnx.Param)}


def test_depthwise_kernels_are_told_apart():
    assert is_depthwise_kernel("dw/kernel", (3, 3, 1, 64))
    assert not is_depthwise_kernel("pw/kernel", (1, 1, 64, 128))
    assert not is_depthwise_kernel("stem/kernel", (3, 3, 3, 64))
    assert not is_depthwise_kernel("stem/bias", (64,))
    # TF's depthwise kernel is (kh, kw, C, 1): fan_in kh*kw*C, fan_out kh*kw
    assert tf_fans((3, 3, 1, 64), depthwise=True) == (576.0, 9.0)
    assert tf_fans((1, 1, 64, 128)) == (64.0, 128.0)


def test_tf_distributions_by_hand():
    rng = np.random.default_rng(0)
    x = draw(InitSpec("truncated_normal", mean=0.5, stddev=0.03), (200_000,), rng)
    assert np.all(np.abs(x - 0.5) <= 0.06)  # redrawn beyond 2 stddev, never rescaled
    assert abs(x.std() / 0.03 - 0.8796) < 0.01  # the truncated draw's deviation
    x = draw(InitSpec("random_normal", stddev=0.01), (200_000,), rng)
    assert abs(x.std() / 0.01 - 1) < 0.01 and np.abs(x).max() > 0.04
    # variance scaling: variance factor / fan, a truncated normal rescaled to keep it
    x = draw(InitSpec("variance_scaling", factor=2.0, mode="fan_out",
                      distribution="truncated_normal"), (3, 3, 1, 4096), rng, depthwise=True)
    assert abs(x.std() / np.sqrt(2.0 / 9) - 1) < 0.02  # TF fan_out of a depthwise kernel: 9
    x = draw(InitSpec("variance_scaling", factor=1.0, mode="fan_in", distribution="uniform"),
             (1, 1, 64, 4096), rng)
    assert np.abs(x).max() <= np.sqrt(3 / 64) and abs(x.std() * 8 - 1) < 0.02
    x = draw(InitSpec("glorot_uniform"), (1, 1, 64, 4096), rng)
    assert np.abs(x).max() <= np.sqrt(6 / (64 + 4096))


def test_rules_draw_what_they_match_first_rule_wins():
    model = Tiny()
    before = _params(model)
    rules = [
        (ParamPattern(r"kernel$", depthwise=True), InitSpec("random_normal", stddev=0.01)),
        (ParamPattern(r"^pw/"), InitSpec("truncated_normal", stddev=0.03)),
        (ParamPattern(r"kernel$"), InitSpec("glorot_uniform")),
    ]
    counts = apply_initializer_rules(model, rules, seed=3)
    after = _params(model)
    assert counts == {0: 1, 1: 1, 2: 1}
    np.testing.assert_array_equal(after["stem/bias"], before["stem/bias"])  # no rule: kept
    assert abs(after["dw/kernel"].std() / 0.01 - 1) < 0.15  # 576 draws
    assert np.abs(after["pw/kernel"]).max() <= 0.06
    assert np.abs(after["stem/kernel"]).max() <= np.sqrt(6 / (27 + 576))
    assert after["pw/kernel"].dtype == before["pw/kernel"].dtype
    # a function of the seed and the path only
    again = Tiny()
    apply_initializer_rules(again, rules, seed=3)
    np.testing.assert_array_equal(_params(again)["pw/kernel"], after["pw/kernel"])
    other = Tiny()
    apply_initializer_rules(other, rules, seed=4)
    assert not np.array_equal(_params(other)["pw/kernel"], after["pw/kernel"])


def test_a_rule_that_matches_nothing_is_an_error():
    rules = [(ParamPattern("^backbone/"), InitSpec("glorot_uniform"))]
    with pytest.raises(ValueError, match=r"train\.initializers\[0\]: params '\^backbone/' "
                                         r"matches no parameter; paths look like dw/kernel"):
        apply_initializer_rules(Tiny(), rules, seed=0)
    rules = [(ParamPattern("^stem/", depthwise=True), InitSpec("glorot_uniform"))]
    with pytest.raises(ValueError, match=r"\(depthwise: True\) matches no parameter"):
        apply_initializer_rules(Tiny(), rules, seed=0)
