"""The one switch of trace-time forms: levels, nesting, and what each level lets through."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxdet.backends import trace
from jaxdet.backends.cpu import conv2d as depthwise
from jaxdet.backends.cpu import kernels as cpu_kernels
from jaxdet.core.portable import exportable
from random_arrays import normal


def test_levels_nest_and_the_strictest_wins():
    assert trace.kernels_allowed() and trace.rewrites_allowed()
    with trace.reference():
        assert not trace.kernels_allowed() and not trace.rewrites_allowed()
        with trace.portable():  # a looser block inside keeps the stricter level
            assert not trace.rewrites_allowed()
        assert not trace.rewrites_allowed()
    with trace.portable():
        assert not trace.kernels_allowed() and trace.rewrites_allowed()
    with exportable():
        assert not trace.kernels_allowed() and trace.rewrites_allowed()
    assert trace.kernels_allowed() and trace.rewrites_allowed()


def _primitives(fn, *args) -> set[str]:
    """The primitives of a fresh trace of ``fn`` (jax caches a function's trace, and the forms
    act at tracing)."""
    return {e.primitive.name for e in jax.make_jaxpr(lambda *a: fn(*a))(*args).eqns}


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU rewrites apply on CPU only")
def test_a_depthwise_convolution_is_rewritten_unless_traced_as_reference():
    """A 3x3 depthwise convolution: shifted multiply-adds (no convolution) by default and in
    the portable forms, one ``conv_general_dilated`` within ``trace.reference()``; the values
    agree."""
    x = normal(0, (1, 8, 8, 4))
    w = normal(1, (3, 3, 1, 4))

    def conv(x, w):
        return depthwise.conv_general_dilated(x, w, (1, 1), "SAME",
                                              dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                              feature_group_count=4)

    assert "conv_general_dilated" not in _primitives(conv, x, w)
    with trace.portable():
        assert "conv_general_dilated" not in _primitives(conv, x, w)
        assert not cpu_kernels.usable()
    with trace.reference():
        assert "conv_general_dilated" in _primitives(conv, x, w)
        reference = conv(x, w)
    assert jnp.allclose(conv(x, w), reference, atol=1e-5)
