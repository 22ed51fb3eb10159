"""A pytest plugin that records where the suite's time goes: ``-p suite_profile``.

Set ``JAXDET_SUITE_PROFILE=<folder>`` and run pytest with ``-p suite_profile``; each process
(the controller and every xdist worker) appends one JSON line per test to
``<folder>/<worker>.jsonl``:

- ``nodeid``, ``worker``, ``start`` / ``end`` (``time.time()``, for the timeline of the
  workers), and the wall seconds of ``setup`` / ``call`` / ``teardown``;
- ``fixtures``: the seconds each fixture's setup took in this test (its own setup, the
  fixtures it asks for included), keyed ``name:scope``;
- ``compiles``: XLA compilations that missed the persistent cache (count, seconds);
  ``cache_loads``: those read back from it (count, seconds); ``traces``: seconds tracing
  jaxprs and lowering them; ``programs``: ``[name, seconds, "miss"|"hit"]`` for each
  compilation over 0.5 s;
- ``subprocesses``: ``[argv head, seconds from start to exit]`` of every process the test
  started (``subprocess.Popen``);
- ``cpu``: the CPU seconds (user + system) the worker and the processes it waited for spent in
  the test; well below ``end - start``, the test waited (a sleep, a disk, a server).

``python -m benchmarks.suite.profile --summarize <folder>`` summarizes the files. Without the
variable the plugin does nothing.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import threading
import time

import pytest

from suite_tiers import watch_compiles

_FOLDER = os.environ.get("JAXDET_SUITE_PROFILE")
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_LOCK = threading.Lock()


class _Record:
    """What one test spent; reset when the next test starts."""

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, nodeid: str | None) -> None:
        self.nodeid = nodeid
        self.start = time.time()
        self.phases: dict[str, float] = {}
        self.fixtures: dict[str, float] = {}
        self.compiles = [0, 0.0]
        self.cache_loads = [0, 0.0]
        self.traces = 0.0
        self.programs: list[list] = []
        self.subprocesses: list[list] = []
        self.cpu_start = _cpu_seconds()


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and the children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CURRENT = _Record()


def _on_compile(seconds: float, name: str, hit: bool) -> None:
    with _LOCK:
        bucket = _CURRENT.cache_loads if hit else _CURRENT.compiles
        bucket[0] += 1
        bucket[1] += seconds
        if seconds > 0.5:
            _CURRENT.programs.append([name, round(seconds, 2), "hit" if hit else "miss"])


def _on_duration(event: str, seconds: float, **_: object) -> None:
    if event in ("/jax/core/compile/jaxpr_trace_duration",
                 "/jax/core/compile/jaxpr_to_mlir_module_duration"):
        with _LOCK:
            _CURRENT.traces += seconds


def _watch_subprocesses() -> None:
    """Wrap ``Popen`` so each started process is timed from start to the exit its owner sees."""
    original_init = subprocess.Popen.__init__
    original_handle = subprocess.Popen._handle_exitstatus  # type: ignore[attr-defined]

    def init(self, args, *rest, **kwargs):  # noqa: ANN001
        self._profile_start = time.perf_counter()
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
        self._profile_head = " ".join(os.path.basename(str(a)) for a in argv[:3])[:80]
        self._profile_record = _CURRENT
        self._profile_nodeid = _CURRENT.nodeid
        return original_init(self, args, *rest, **kwargs)

    def handle(self, *args, **kwargs):  # noqa: ANN001
        out = original_handle(self, *args, **kwargs)
        start = getattr(self, "_profile_start", None)
        if start is not None and self._profile_nodeid == _CURRENT.nodeid:
            self._profile_record.subprocesses.append(
                [self._profile_head, round(time.perf_counter() - start, 2)])
            self._profile_start = None
        return out

    subprocess.Popen.__init__ = init
    subprocess.Popen._handle_exitstatus = handle  # type: ignore[attr-defined]


if _FOLDER:

    _ACTIVE = [False]

    def pytest_configure(config) -> None:  # noqa: ANN001
        # xdist's controller runs no test: only its workers (or a plain run) record
        if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
            return
        _ACTIVE[0] = True
        # after the conftest files: jax is imported once they have set its environment
        os.makedirs(_FOLDER, exist_ok=True)
        from jax import monitoring

        watch_compiles(_on_compile)
        monitoring.register_event_duration_secs_listener(_on_duration)
        _watch_subprocesses()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(nodeid: str, location) -> None:  # noqa: ANN001
        _CURRENT.reset(nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(fixturedef, request):  # noqa: ANN001
        start = time.perf_counter()
        yield
        key = f"{fixturedef.argname}:{fixturedef.scope}"
        _CURRENT.fixtures[key] = round(
            _CURRENT.fixtures.get(key, 0.0) + time.perf_counter() - start, 3)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):  # noqa: ANN001
        yield
        _CURRENT.phases[call.when] = round(call.stop - call.start, 3)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(nodeid: str, location) -> None:  # noqa: ANN001
        if not _ACTIVE[0]:
            return
        record = _CURRENT
        line = {
            "nodeid": nodeid, "worker": _WORKER, "start": round(record.start, 3),
            "end": round(time.time(), 3), **record.phases,
            "fixtures": {k: v for k, v in record.fixtures.items() if v >= 0.05},
            "compiles": [record.compiles[0], round(record.compiles[1], 2)],
            "cache_loads": [record.cache_loads[0], round(record.cache_loads[1], 2)],
            "traces": round(record.traces, 2), "programs": record.programs,
            "subprocesses": record.subprocesses,
            "cpu": round(_cpu_seconds() - record.cpu_start, 2),
        }
        with open(os.path.join(_FOLDER, f"{_WORKER}.jsonl"), "a") as out:
            out.write(json.dumps(line) + "\n")
