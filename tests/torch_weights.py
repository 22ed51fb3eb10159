"""The torch reference fixtures' weights, drawn again in the tests: the rule of the fixture
generators (tests/models/fixtures/make_fixtures.py, make_effdet_fixture.py, ...), so a test
fills jaxdet's model with the weights the fixture's torch model had."""

import numpy as np


def torch_deterministic_weights(shapes: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """The fixture generators' weight rule (make_fixtures.py, make_effdet_fixture.py), drawn
    from one ``default_rng(seed)`` in the fixture's key order: kernels (ndim >= 2, torch
    layout) normal * sqrt(1 / fan_in); running_var, 1-D ``.weight`` (norm scales) and
    ``edge_weights`` U(0.5, 1.5); running_mean and biases U(-0.1, 0.1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, shape in shapes.items():
        if len(shape) >= 2:
            value = rng.standard_normal(shape) * np.sqrt(1.0 / np.prod(shape[1:]))
        elif key.endswith(("running_var", "edge_weights", ".weight")):
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.uniform(-0.1, 0.1, shape)
        out[key] = value.astype(np.float32)
    return out
