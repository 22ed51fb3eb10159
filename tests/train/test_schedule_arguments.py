"""A schedule's numbers enter the compiled train step as arguments: rates computed from them
equal the schedule's own, and configs that differ only in them (a longer ``train.num_steps``,
another base rate or warm-up length) lower to one program, so the persistent compilation
cache serves a resumed-longer run or a learning-rate sweep without compiling again."""

import jax
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.train import build as train_build
from jaxdet.train import optim
from jaxdet.train.step import abstract_train_batch, abstract_train_state

STEPS = np.arange(0, 3000, 7, dtype=np.int32)


def _bound_rates(schedule: optim.Schedule, numbers: dict) -> np.ndarray:
    def rates(steps, numbers):
        with schedule.bound(numbers):
            return jax.vmap(schedule)(steps)
    return np.asarray(jax.jit(rates)(STEPS, numbers))


SCHEDULES = {
    "cosine": lambda total: optim.cosine_decay_with_warmup(
        0.08, total, warmup_learning_rate=0.0267, warmup_steps=200),
    "cosine_hold": lambda total: optim.cosine_decay_with_warmup(
        0.04, total, warmup_steps=100, hold_base_rate_steps=300),
    "cosine_plain": lambda total: optim.cosine_decay_with_warmup(0.02, total),
    "manual": lambda total: optim.manual_stepping([total // 4, total // 2], [0.1, 0.02, 0.004],
                                                  warmup=True),
    "exponential": lambda total: optim.exponential_decay(
        0.004, total // 10, 0.95, burnin_learning_rate=0.001, burnin_steps=50,
        min_learning_rate=1e-4),
    "constant": lambda total: optim.constant(total * 1e-6),
    "scaled": lambda total: optim.cosine_decay_with_warmup(0.08, total).scaled(0.5),
}


@pytest.mark.parametrize("kind", sorted(SCHEDULES))
def test_rates_from_arguments_equal_the_schedules_own(kind):
    make = SCHEDULES[kind]
    short, long_ = make(2000), make(2800)
    # one program for both: the second schedule's numbers given to the first's program
    for schedule in (short, long_):
        plain = np.asarray(jax.jit(jax.vmap(schedule))(STEPS))
        np.testing.assert_array_equal(_bound_rates(short, schedule.arguments()), plain)
    assert not np.array_equal(_bound_rates(short, short.arguments()),
                              _bound_rates(short, long_.arguments()))


def test_cosine_rates_by_hand_from_arguments():
    schedule = optim.cosine_decay_with_warmup(0.1, 100, warmup_learning_rate=0.01,
                                              warmup_steps=10)
    with schedule.bound(schedule.arguments()):
        got = [float(schedule(np.int32(s))) for s in (0, 5, 10, 55, 100, 101)]
    np.testing.assert_allclose(got, [0.01, 0.055, 0.1, 0.05, 0.0, 0.0], atol=1e-7)


def test_train_step_program_is_independent_of_the_schedules_numbers(tiny_overrides):
    def lowered(*overrides: str) -> str:
        config = load_config("shapes_demo", tiny_overrides + list(overrides))
        task = tasks.build_task(config)
        tx, schedule = train_build.build_optimizer(config.train)
        step = train_build.build_train_step(config, task, tx, schedule)
        state = abstract_train_state(task, tx, ema=False)
        return step.lower(state, abstract_train_batch(task, config.train.batch_size)).as_text()

    tiny = lowered()
    assert lowered("train.num_steps=600", "train.learning_rate.learning_rate_base=0.3",
                   "train.learning_rate.warmup_steps=40") == tiny
    assert lowered("train.learning_rate.warmup_steps=0") != tiny  # another shape: no warm-up
