"""The train step's memory, read from XLA after compiling and checked against what is free
before the first run: donated buffers count once, the compilation is reused, a step that
cannot fit is one line with what to lower."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxdet.backends import device_memory
from jaxdet.cli.main import main
from jaxdet.train.step_memory import StepMemory, StepTooLarge, check, measure

_GIB = 2**30


def test_outputs_count_unless_they_reuse_a_donated_argument():
    x = jnp.ones((512, 256), jnp.float32)  # 512 KiB
    doubled = measure(jax.jit(lambda a: jnp.concatenate([a, a])), x)
    assert doubled.resident == x.nbytes and doubled.platform == "cpu" and doubled.devices == 1
    assert doubled.working >= 2 * x.nbytes  # a new output twice x's size
    in_place = measure(jax.jit(lambda a: a + 1.0, donate_argnums=0), jnp.ones_like(x))
    assert in_place.resident == x.nbytes and in_place.working < x.nbytes  # written over x
    assert in_place.free is not None and in_place.free > 0


def test_the_call_after_measuring_compiles_nothing_more():
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiles.append(event)
        if event == "/jax/core/compile/backend_compile_duration" else None)
    step = jax.jit(lambda a, b: (a @ b).sum() + jnp.tanh(a).mean())
    a, b = jnp.ones((96, 80)), jnp.ones((80, 72))
    measure(step, a, b)
    measured = len(compiles)
    step(a, b).block_until_ready()
    assert measured >= 1 and len(compiles) == measured


def test_a_plain_function_is_not_measured():
    assert measure(lambda a: a, jnp.ones(3)) is None


def _memory(working: int, free: int | None, *, devices: int = 1, shared: bool = False,
            resident: int = 0) -> StepMemory:
    return StepMemory(resident=resident, working=working, devices=devices,
                      platform="cpu" if shared else "gpu", host_shared=shared, free=free)


@pytest.mark.parametrize("memory, fits", [
    (_memory(3 * _GIB, 2 * _GIB, resident=_GIB), False),
    (_memory(2 * _GIB, 2 * _GIB, resident=_GIB), True),
    # CPU devices share the host's memory: 4 x 1 GiB against 3 GiB
    (_memory(_GIB, 3 * _GIB, devices=4, shared=True), False),
    (_memory(_GIB, 5 * _GIB, devices=4, shared=True), True),
    (_memory(99 * _GIB, None), True),  # a backend that does not say what is free
])
def test_a_step_that_cannot_fit_is_refused(memory, fits):
    if fits:
        check(memory)
        return
    pattern = (r"^out of memory: a run of the train step needs (3\.0|4\.0) GiB beside its "
               r"(1\.0|0\.0) GiB of state and batch, and .* (2\.0|3\.0) GiB .*train\.batch_size")
    with pytest.raises(StepTooLarge, match=pattern):
        check(memory)


@pytest.mark.slow
def test_jaxdet_train_refuses_a_step_too_large_in_one_line(tiny_overrides, tmp_path, monkeypatch,
                                                           capsys):
    """The suite's tiny config: its train step program is the one other tests compile."""
    monkeypatch.setattr(device_memory, "host_available_bytes", lambda: 2**20)  # 1 MiB free
    sets = [arg for item in tiny_overrides for arg in ("--set", item)]
    assert main(["train", "--config", "shapes_demo", "--workdir", str(tmp_path / "run"), *sets,
                 "--no-eval", "--no-progress"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: out of memory: a run of the train step needs ")
    assert "this machine has 0.0 GiB available" in last and "train.batch_size" in last
    assert not (tmp_path / "run" / "checkpoints").exists() or not any(
        (tmp_path / "run" / "checkpoints").iterdir())
