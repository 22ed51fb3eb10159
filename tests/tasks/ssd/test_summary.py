"""The SSD family's summary (``tasks.ssd.summary``): parameter counts by hand formula,
anchors, output shapes, XLA FLOPs against analytic convolution multiply-adds, and the ``jaxdet
summary`` command."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.cli import main as cli
from jaxdet.config.loader import load_config
from jaxdet.models.abstract import abstract_build
from jaxdet.models.inspect import compiled_flops, flops_of
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.ssd.summary import FLOPS_METHOD, format_summary, head_branch, model_summary

# shapes_demo (ResNet-18 x0.25 + FPN P3-P5 + weight-shared head, 3 classes, 6 anchors per
# location) shrunk; a non-square input catches height/width mix-ups.
D, L, H, W = 16, 2, 64, 96
TINY = [
    f"model.neck.depth={D}",
    f"model.head.depth={D}",
    f"model.head.num_layers_before_predictor={L}",
    f"data.resizer.height={H}",
    f"data.resizer.width={W}",
]
K, A, LEVELS = 3, 6, (3, 4, 5)
RESNET_WIDTHS = (16, 32, 64, 128)  # 64 * 0.25 * 2**stage; out_channels of levels 2..5


@pytest.fixture(scope="module")
def config():
    return load_config("shapes_demo", TINY)


@pytest.fixture(scope="module")
def summary(config):
    return model_summary(config)


# --------------------------------------------------------------------------- hand formulas


def conv_params(k: int, cin: int, cout: int, bias: bool = False) -> int:
    return k * k * cin * cout + (cout if bias else 0)


def bn_params(c: int) -> int:  # scale + bias (mean/var are statistics, counted apart)
    return 2 * c


def resnet18_params() -> int:
    total = conv_params(7, 3, 16) + bn_params(16)
    cin = 16
    for i, width in enumerate(RESNET_WIDTHS):
        for j in range(2):
            stride = 2 if (j == 0 and i > 0) else 1
            total += conv_params(3, cin, width) + bn_params(width)
            total += conv_params(3, width, width) + bn_params(width)
            if stride != 1 or cin != width:
                total += conv_params(1, cin, width) + bn_params(width)
            cin = width
    return total


def fpn_params() -> int:
    lateral = sum(conv_params(1, RESNET_WIDTHS[lvl - 2], D, bias=True) for lvl in LEVELS)
    smoothing = (len(LEVELS) - 1) * (conv_params(3, D, D) + bn_params(D))
    return lateral + smoothing


def head_branch_params(outputs_per_anchor: int) -> int:
    """One weight-shared tower (L convs, per-level BN) + its 3x3 predictor with bias."""
    tower = L * conv_params(3, D, D) + L * len(LEVELS) * bn_params(D)
    return tower + conv_params(3, D, A * outputs_per_anchor, bias=True)


def test_parameter_counts_match_hand_formulas(summary):
    p = summary["parameters"]
    assert p["components"] == {"backbone": resnet18_params(), "neck": fpn_params(),
                               "head": head_branch_params(4) + head_branch_params(K)}
    assert p["head_branches"] == {"box": head_branch_params(4), "class": head_branch_params(K),
                                  "shared": 0}
    assert p["total"] == sum(p["components"].values()) == sum(p["head_branches"].values()) + (
        resnet18_params() + fpn_params())


def test_counts_equal_the_built_task_variables(config, summary):
    built = {}

    def variables():  # build_task traced abstractly: same variables, nothing initialized
        built["task"] = tasks.build_task(config)
        return built["task"].initial_variables()

    params, stats = jax.eval_shape(variables)
    task = built["task"]
    assert summary["parameters"]["total"] == sum(x.size for x in jax.tree.leaves(params))
    assert summary["batch_norm_statistics"]["total"] == sum(
        x.size for x in jax.tree.leaves(stats))
    # Per component, BN statistics are mean + var of every BN layer.
    head_bns = 2 * L * len(LEVELS)
    assert summary["batch_norm_statistics"]["components"]["head"] == head_bns * 2 * D
    assert summary["anchors"]["total"] == len(task.anchors)


def test_anchors_and_output_shapes(summary):
    levels = summary["anchors"]["levels"]
    assert [lvl["level"] for lvl in levels] == list(LEVELS)
    total = 0
    for lvl, out in zip(levels, summary["outputs"]["levels"], strict=True):
        h, w = math.ceil(H / 2 ** lvl["level"]), math.ceil(W / 2 ** lvl["level"])
        assert lvl["feature_map"] == [h, w]
        assert lvl["anchors_per_location"] == A
        assert lvl["anchors"] == h * w * A
        assert out["class_logits"] == [1, h * w * A, K]
        assert out["box_encodings"] == [1, h * w * A, 4]
        total += h * w * A
    assert summary["anchors"]["total"] == total
    assert summary["outputs"]["class_logits"] == [1, total, K]
    assert summary["outputs"]["box_encodings"] == [1, total, 4]
    assert summary["input_size"] == [H, W]


# --------------------------------------------------------------------------- FLOPs


def _valid_taps(n: int, m: int, k: int, s: int, d: int, lo: int) -> int:
    """Kernel taps that land inside the input, summed over the m outputs of one dimension."""
    return sum(1 for o in range(m) for j in range(k) if 0 <= o * s - lo + j * d < n)


def _conv_macs(in_shape, out_shape, kernel_shape, strides, padding, dilation) -> int:
    """Multiply-adds of an NHWC conv, counting only taps inside the input (as XLA does)."""
    kh, kw, cin_per_group, cout = kernel_shape
    strides = (strides,) * 2 if isinstance(strides, int) else tuple(strides)
    dilation = (dilation,) * 2 if isinstance(dilation, int) else tuple(dilation)
    if isinstance(padding, str):
        pads = jax.lax.padtype_to_pads(
            in_shape[1:3], [(k - 1) * dd + 1 for k, dd in zip((kh, kw), dilation, strict=True)],
            strides, padding)
    else:
        pads = [tuple(p) for p in padding]
    taps = math.prod(
        _valid_taps(in_shape[1 + i], out_shape[1 + i], (kh, kw)[i], strides[i], dilation[i],
                    pads[i][0])
        for i in range(2)
    )
    return in_shape[0] * taps * cin_per_group * cout


def test_valid_tap_formula_matches_xla_for_single_convs():
    for size, k, stride, pad in [((8, 8), 3, 1, "SAME"), ((8, 6), 3, 2, "SAME"),
                                 ((9, 7), 7, 2, ((3, 3), (3, 3))), ((4, 4), 1, 2, "VALID")]:
        x = jax.ShapeDtypeStruct((1, *size, 5), jnp.float32)
        kern = jax.ShapeDtypeStruct((k, k, 5, 7), jnp.float32)

        def f(x, kern, stride=stride, pad=pad):
            return jax.lax.conv_general_dilated(x, kern, (stride, stride), pad,
                                                dimension_numbers=("NHWC", "HWIO", "NHWC"))

        out = jax.eval_shape(f, x, kern)
        ca = jax.jit(f).lower(x, kern).compile().cost_analysis()
        macs = _conv_macs(x.shape, out.shape, kern.shape, stride, pad, 1)
        assert flops_of(ca) == 2 * macs, (size, k, stride, pad)


def _record_convs(module: nnx.Module, *args, macs_of) -> int:
    """Trace ``module(*args)`` abstractly and add up ``macs_of(conv, inputs, out)`` over every
    nnx.Conv call."""
    macs = []
    original = nnx.Conv.__call__

    def recording(self, inputs, *a, **kw):
        out = original(self, inputs, *a, **kw)
        macs.append(macs_of(self, inputs, out))
        return out

    graphdef, state = nnx.split(module)
    nnx.Conv.__call__ = recording
    try:
        jax.eval_shape(lambda s, *xs: nnx.merge(graphdef, s)(*xs), state, *args)
    finally:
        nnx.Conv.__call__ = original
    return sum(macs)


def _recorded_conv_macs(module: nnx.Module, *args) -> int:
    """Every nnx.Conv's multiply-adds on taps inside the input (as XLA counts them)."""
    return _record_convs(module, *args, macs_of=lambda c, x, out: _conv_macs(
        x.shape, out.shape, c.kernel.shape, c.strides, c.padding, c.kernel_dilation))


def test_flops_match_analytic_conv_macs(config, summary):
    """Each component's XLA FLOPs are 2 x its conv multiply-adds plus a little elementwise
    work (BN, activations, residual adds, max-pool): within 5%, never below."""
    model = abstract_build(lambda: ssd_build.build_model(config))
    model.eval()
    images = jax.ShapeDtypeStruct((1, H, W, 3), jnp.float32)
    backbone_out = jax.eval_shape(lambda s, x: nnx.merge(*s)(x), nnx.split(model.backbone),
                                  images)
    neck_out = jax.eval_shape(lambda s, x: nnx.merge(*s)(x), nnx.split(model.neck),
                              backbone_out)
    analytic = {
        "backbone": 2 * _recorded_conv_macs(model.backbone, images),
        "neck": 2 * _recorded_conv_macs(model.neck, backbone_out),
        "head": 2 * _recorded_conv_macs(model.head, neck_out),
    }
    flops = summary["flops"]
    for name, expected in analytic.items():
        assert expected <= flops["components"][name] <= 1.05 * expected, name
    assert flops["total"] == sum(flops["components"].values())
    assert sum(analytic.values()) <= flops["total"] <= 1.05 * sum(analytic.values())
    assert flops["gflops"] == pytest.approx(flops["total"] / 1e9)
    assert flops["method"] == FLOPS_METHOD
    # The parts add up to the whole detector compiled in one piece.
    whole = compiled_flops(model, images)
    assert flops["total"] == pytest.approx(whole, rel=5e-3)


def _full_tap_macs(module: nnx.Module, *args) -> int:
    """Every nnx.Conv's ``out_h * out_w * kh * kw * cin_per_group * cout``, padding taps
    included (the papers' convention)."""
    return _record_convs(module, *args, macs_of=lambda c, x, out: math.prod(out.shape[:3])
                         * math.prod(c.kernel.shape))


def test_multiply_adds_are_full_tap_conv_macs(config, summary):
    model = abstract_build(lambda: ssd_build.build_model(config))
    model.eval()
    images = jax.ShapeDtypeStruct((1, H, W, 3), jnp.float32)
    backbone_out = jax.eval_shape(lambda s, x: nnx.merge(*s)(x), nnx.split(model.backbone),
                                  images)
    neck_out = jax.eval_shape(lambda s, x: nnx.merge(*s)(x), nnx.split(model.neck), backbone_out)
    expected = {
        "backbone": _full_tap_macs(model.backbone, images),
        "neck": _full_tap_macs(model.neck, backbone_out),
        "head": _full_tap_macs(model.head, neck_out),
    }
    macs = summary["multiply_adds"]
    assert macs["components"] == expected
    assert macs["total"] == sum(expected.values())
    # Padding taps count here and not in XLA's FLOPs, elementwise work the other way round.
    assert 0.8 < summary["flops"]["total"] / (2 * macs["total"]) < 1.1
    assert "multiply-adds" in format_summary(summary)


def test_flops_of_accepts_dict_list_and_none():
    assert flops_of({"flops": 6.0, "bytes accessed": 1.0}) == 6.0
    assert flops_of([{"flops": 2.0}, {"flops": 3.0}]) == 5.0
    assert flops_of(None) is None
    assert flops_of([{}]) is None


def test_head_branch():
    assert head_branch(("box_tower", "0", "kernel")) == "box"
    assert head_branch(("class_norms", "1", "0", "scale")) == "class"
    assert head_branch(("predictors", "2", "class_predictor", "conv", "bias")) == "class"
    assert head_branch(("predictors", "0", "tower", "0", "conv", "kernel")) == "shared"
    assert head_branch(("box_tower", "0", "kernel"), shared_tower=True) == "shared"
    assert head_branch(("box_predictor", "kernel"), shared_tower=True) == "box"


# --------------------------------------------------------------------------- text and CLI


def test_format_summary(summary):
    text = format_summary(summary)
    total = summary["parameters"]["total"]
    assert f"{total:,}" in text and "," in f"{total:,}"
    backbone = summary["parameters"]["components"]["backbone"]
    share = 100 * backbone / total
    assert any(line.split()[:3] == ["backbone", f"{backbone:,}", f"({share:.1f}%)"]
               for line in text.splitlines())
    assert FLOPS_METHOD in text
    for lvl in summary["anchors"]["levels"]:
        h, w = lvl["feature_map"]
        assert f"P{lvl['level']}" in text and f"{h} x {w}" in text
    assert f"[1, {summary['anchors']['total']}, {K}]" in text


def test_cli_json(capsys):
    assert cli.main(["summary", "--config", "shapes_demo", *sum([["--set", s] for s in TINY], []),
                     "--json", "--no-flops"]) == 0
    out = capsys.readouterr().out
    d = json.loads(out)  # exactly one JSON object on stdout
    assert set(d) >= {"config", "description", "input_size", "parameters",
                      "batch_norm_statistics", "anchors", "outputs", "flops"}
    assert d["flops"] is None
    assert d["parameters"]["components"]["head"] == head_branch_params(4) + head_branch_params(K)

    assert cli.main(["summary", "--config", "shapes_demo", *sum([["--set", s] for s in TINY], []),
                     "--set", "model.head.depth=8", "--json", "--no-flops"]) == 0
    d8 = json.loads(capsys.readouterr().out)
    tower8 = L * len(LEVELS) * bn_params(8) + conv_params(3, D, 8) + conv_params(3, 8, 8)
    expected = 2 * tower8 + conv_params(3, 8, A * 4, True) + conv_params(3, 8, A * K, True)
    assert d8["parameters"]["components"]["head"] == expected
    assert d8["parameters"]["components"]["backbone"] == resnet18_params()


@pytest.mark.slow
def test_cli_text_with_flops(capsys):
    assert cli.main(["summary", "--config", "shapes_demo", "--set", "data.resizer.height=32",
                     "--set", "data.resizer.width=32"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("shapes_demo: ") and FLOPS_METHOD in out and "backbone" in out
