import math

import numpy as np
import pytest

from jaxdet.core.anchors import MultiscaleAnchorGenerator, SSDAnchorGenerator


def test_multiscale_two_levels_64x64_coordinate_by_coordinate():
    gen = MultiscaleAnchorGenerator(
        min_level=5, max_level=6, anchor_scale=1.0, scales_per_octave=1, aspect_ratios=(1.0,)
    )
    assert gen.num_anchors_per_location() == [1, 1]
    assert gen.feature_map_shapes((64, 64)) == [(2, 2), (1, 1)]
    anchors = gen.generate((64, 64))
    assert anchors.dtype == np.float32 and anchors.shape == (5, 4)
    # Level 5: stride 32, size 32, centers 16 / 48 px, order y -> x; level 6: one 64 px box.
    expected = [
        [0.0, 0.0, 0.5, 0.5],
        [0.0, 0.5, 0.5, 1.0],
        [0.5, 0.0, 1.0, 0.5],
        [0.5, 0.5, 1.0, 1.0],
        [0.0, 0.0, 1.0, 1.0],
    ]
    np.testing.assert_allclose(anchors, expected, atol=1e-7)


def test_multiscale_within_location_order_scale_outer_aspect_inner():
    gen = MultiscaleAnchorGenerator(
        min_level=5,
        max_level=5,
        anchor_scale=1.0,
        scales_per_octave=2,
        aspect_ratios=(1.0, 4.0),
        normalize_coordinates=False,
    )
    anchors = gen.generate((32, 32))
    r = 16.0 * math.sqrt(2.0)  # half size at octave scale 2**0.5
    expected = [
        [0.0, 0.0, 32.0, 32.0],  # scale 1, aspect 1
        [8.0, -16.0, 24.0, 48.0],  # scale 1, aspect 4: h = 32 / 2, w = 32 * 2
        [16 - r, 16 - r, 16 + r, 16 + r],  # scale sqrt(2), aspect 1
        [16 - r / 2, 16 - 2 * r, 16 + r / 2, 16 + 2 * r],  # scale sqrt(2), aspect 4
    ]
    np.testing.assert_allclose(anchors, expected, rtol=1e-6, atol=1e-5)


def test_multiscale_non_square_and_counts():
    gen = MultiscaleAnchorGenerator(
        min_level=5, max_level=5, anchor_scale=1.0, scales_per_octave=1, aspect_ratios=(1.0,)
    )
    anchors = gen.generate((64, 32))  # H=64, W=32 -> 2x1 grid
    np.testing.assert_allclose(anchors, [[0.0, 0.0, 0.5, 1.0], [0.5, 0.0, 1.0, 1.0]])
    retina = MultiscaleAnchorGenerator(min_level=3, max_level=7)
    assert retina.num_anchors_per_location() == [6] * 5
    cells = sum(h * w for h, w in retina.feature_map_shapes((640, 640)))
    assert cells == 80 * 80 + 40 * 40 + 20 * 20 + 10 * 10 + 5 * 5
    assert retina.generate((640, 640)).shape == (6 * cells, 4)
    # Non-divisible sizes round the grid up.
    assert retina.feature_map_shapes((100, 50))[-1] == (1, 1)


def test_ssd_two_layers_coordinate_by_coordinate():
    gen = SSDAnchorGenerator(num_layers=2, aspect_ratios=(1.0, 2.0))
    assert gen.layer_scales() == pytest.approx([0.2, 0.95, 1.0])
    assert gen.num_anchors_per_location() == [3, 3]
    anchors = gen.generate([(2, 2), (1, 1)], (100, 100))
    assert anchors.dtype == np.float32 and anchors.shape == (4 * 3 + 3, 4)

    def box(yc, xc, h, w):
        return [yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2]

    s2 = math.sqrt(2.0)
    layer0_cell00 = [
        box(0.25, 0.25, 0.1, 0.1),
        box(0.25, 0.25, 0.2 / s2, 0.2 * s2),
        box(0.25, 0.25, 0.2 * s2, 0.2 / s2),
    ]
    np.testing.assert_allclose(anchors[:3], layer0_cell00, rtol=1e-6)
    # Cell (0, 1) of layer 0 has center (0.25, 0.75): the 2nd location in y -> x order.
    np.testing.assert_allclose(anchors[3], box(0.25, 0.75, 0.1, 0.1), rtol=1e-6)
    np.testing.assert_allclose(anchors[6], box(0.75, 0.25, 0.1, 0.1), rtol=1e-6)
    si = math.sqrt(0.95 * 1.0)
    layer1 = [box(0.5, 0.5, 0.95, 0.95), box(0.5, 0.5, 0.95 / s2, 0.95 * s2), box(0.5, 0.5, si, si)]
    np.testing.assert_allclose(anchors[12:], layer1, rtol=1e-6)


def test_ssd_defaults_options_and_non_square():
    gen = SSDAnchorGenerator()
    assert gen.layer_scales() == pytest.approx([0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.0])
    assert gen.num_anchors_per_location() == [3, 6, 6, 6, 6, 6]
    no_reduce = SSDAnchorGenerator(
        num_layers=2,
        scales=(0.3, 0.6),
        aspect_ratios=(1.0,),
        interpolated_scale_aspect_ratio=0.0,
        reduce_boxes_in_lowest_layer=False,
    )
    assert no_reduce.box_specs() == [[(0.3, 1.0)], [(0.6, 1.0)]]
    # Non-square image (H=200, W=100): base size (0.5, 1.0) keeps anchors square in pixels.
    one = SSDAnchorGenerator(
        num_layers=1,
        aspect_ratios=(1.0,),
        interpolated_scale_aspect_ratio=0.0,
        reduce_boxes_in_lowest_layer=False,
    )
    anchors = one.generate([(1, 1)], (200, 100))
    np.testing.assert_allclose(anchors, [[0.45, 0.4, 0.55, 0.6]], rtol=1e-6)
    with pytest.raises(ValueError, match="feature map shapes"):
        gen.generate([(1, 1)], (100, 100))
