"""The suite's two tiers, and the check that keeps each test in the right one.

- The **quick tier** (``make test-quick``: every test not marked ``slow``) is the loop while
  editing: unit tests that compile no large program and start no process.
- The **slow tier** (``@pytest.mark.slow``) holds the rest: end-to-end runs, ``jaxdet``
  processes, train steps compiled whole, tests over about 2 s on a cold 2-core run. Two rules
  put tests there without a mark: a test in an ``xdist_group`` (groups exist to share a
  compiled model or a trained workdir) and a test asking for a fixture in
  :data:`SLOW_FIXTURES` (it starts a server or trains a model). ``make test`` runs both tiers.

The check (on in every run; the conftest loads this plugin): a test outside the slow tier
that starts a process (``subprocess.Popen`` or a multiprocessing worker) or compiles one XLA
program for longer than :data:`LARGE_COMPILE_S` fails at teardown, naming what it did and
what to do. Only compilations that miss the persistent cache count, so a cold run (CI's) is
the one that catches a test in the wrong tier; a warm run passes it. The bound is wall time, so
it stretches with the machine: when a compile passes it, a fixed reference program is compiled
(once per process) and the bound is multiplied by how much slower that compiles here than on an
idle 2-core VM (:func:`machine_slowness`); a slow or crowded machine does not fail a quick test
its compile times would pass on CI's usual one.
"""

from __future__ import annotations

import multiprocessing.util
import os
import subprocess
import threading
import time
from collections.abc import Callable

import pytest

# One XLA:CPU program compiled for longer than this makes a test a slow-tier one. The quick
# tier's largest programs compile in about 1 s on a 2-core CPU, the tiny train step in 5-6 s:
# the bound sits between with room for a slower machine.
LARGE_COMPILE_S = 3.0
# the reference program of machine_slowness compiles in this long on an idle 2-core AMD EPYC VM
# (0.47-0.58 s measured; the Intel Xeon VMs are faster and keep the bound as it is)
REFERENCE_COMPILE_S = 0.5

# fixtures whose first user pays for a process or a trained model: every user is slow-tier
# (the one that happens to run first would otherwise fail the check)
SLOW_FIXTURES = frozenset({"gcs", "s3", "trained"})

_LOCK = threading.Lock()


class _Watch:
    """What the running test did that the quick tier forbids; reset per test."""

    def __init__(self) -> None:
        self.processes: list[str] = []
        self.largest: tuple[float, str] = (0.0, "")


_WATCH = _Watch()


def watch_compiles(on_compile: Callable[[float, str, bool], None]) -> None:
    """Call ``on_compile(seconds, program name, hit)`` after every XLA compilation of this
    process (``hit``: the program was read back from the persistent cache), through
    ``jax.monitoring``: JAX reports a cache hit just before that compilation's duration."""
    from jax import monitoring

    pending_hit = [False]

    def on_event(event: str, **_: object) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            pending_hit[0] = True

    def on_duration(event: str, seconds: float, **kwargs: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            with _LOCK:
                hit, pending_hit[0] = pending_hit[0], False
            on_compile(seconds, str(kwargs.get("fun_name", "a program")), hit)

    monitoring.register_event_listener(on_event)
    monitoring.register_event_duration_secs_listener(on_duration)


_SLOWNESS: list[float] = []


def machine_slowness() -> float:
    """How many times longer than :data:`REFERENCE_COMPILE_S` a fixed small program (a
    four-layer convolutional network's loss and gradient, 2 x 32 x 32 images) takes to compile
    here and now, at least 1; measured once per process, the persistent cache off."""
    if not _SLOWNESS:
        import jax
        import jax.numpy as jnp

        def loss(weights, x):
            for w in weights[:-1]:
                x = jax.nn.relu(jax.lax.conv_general_dilated(
                    x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
            return jnp.mean(x @ weights[-1])

        weights = [jnp.ones((3, 3, c, 16)) for c in (3, 16, 16, 16)] + [jnp.ones((16, 4))]
        x = jnp.ones((2, 32, 32, 3))
        cached = jax.config.jax_enable_compilation_cache
        jax.config.update("jax_enable_compilation_cache", False)
        try:
            times = []
            for _ in range(2):
                start = time.perf_counter()
                jax.jit(jax.value_and_grad(loss)).lower(weights, x).compile()
                times.append(time.perf_counter() - start)
        finally:
            jax.config.update("jax_enable_compilation_cache", cached)
        _SLOWNESS.append(max(1.0, min(times) / REFERENCE_COMPILE_S))
    return _SLOWNESS[0]


def _note_compile(seconds: float, name: str, hit: bool) -> None:
    if not hit and seconds > _WATCH.largest[0]:
        _WATCH.largest = (seconds, name)


def _head(args: object) -> str:
    argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)  # type: ignore[call-overload]
    return " ".join(os.path.basename(str(a)) for a in argv[:4])[:100]


def _watch_processes() -> None:
    popen_init = subprocess.Popen.__init__
    spawn = multiprocessing.util.spawnv_passfds

    def init(self, args, *rest, **kwargs):  # noqa: ANN001
        _WATCH.processes.append(_head(args))
        return popen_init(self, args, *rest, **kwargs)

    def spawnv_passfds(path, args, passfds):  # noqa: ANN001
        _WATCH.processes.append("multiprocessing worker " + _head(args))
        return spawn(path, args, passfds)

    subprocess.Popen.__init__ = init
    multiprocessing.util.spawnv_passfds = spawnv_passfds


def pytest_configure(config: pytest.Config) -> None:
    watch_compiles(_note_compile)  # after the conftest files set jax's environment
    _watch_processes()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The rules of the slow tier (module docstring), before ``-m`` selects: first."""
    for item in items:
        if item.get_closest_marker("slow"):
            continue
        if (item.get_closest_marker("xdist_group")
                or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _WATCH.processes.clear()
    _WATCH.largest = (0.0, "")


def tier_violation(processes: list[str], largest: tuple[float, str],
                   slowness: Callable[[], float] = machine_slowness) -> str | None:
    """Why a test that did this belongs in the slow tier (None when it does not).
    ``slowness()`` (asked only when the largest compile passes :data:`LARGE_COMPILE_S`)
    stretches the bound on a slow machine."""
    did = []
    if processes:
        did.append(f"started {len(processes)} process(es) ({processes[0]})")
    bound = LARGE_COMPILE_S
    if largest[0] > bound:
        bound *= slowness()
    if largest[0] > bound:
        did.append(f"compiled {largest[1]} in {largest[0]:.1f} s (over {bound:.1f} s)")
    if not did:
        return None
    return ("quick-tier test " + " and ".join(did) + ": mark it @pytest.mark.slow (make test "
            "runs it, make test-quick does not) or make it cheaper (CONTRIBUTING.md, 'The "
            "suite's budget')")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    if item.get_closest_marker("slow") or item.get_closest_marker("exhaustive"):
        return
    why = tier_violation(list(_WATCH.processes), _WATCH.largest)
    if why:
        pytest.fail(why, pytrace=False)
