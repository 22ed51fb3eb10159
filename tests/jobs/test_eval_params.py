"""Evaluation reads the moving average of the weights when the config says so and the state
has one, else the trained weights."""

from jaxdet.config.loader import load_config
from jaxdet.jobs.inference import eval_params


def test_eval_uses_the_moving_average_when_asked_and_present(tiny_overrides):
    ema = load_config("shapes_demo", [*tiny_overrides, "train.ema_decay=0.99",
                                      "eval.use_ema=true"])
    plain = load_config("shapes_demo", [*tiny_overrides, "eval.use_ema=false"])
    state = {"params": {"w": 1.0}, "ema_params": {"w": 2.0}}
    assert eval_params(ema, state) == {"w": 2.0}
    assert eval_params(plain, state) == {"w": 1.0}
    assert eval_params(ema, {"params": {"w": 1.0}, "ema_params": {}}) == {"w": 1.0}
