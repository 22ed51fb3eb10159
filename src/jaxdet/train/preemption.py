"""Stop training cleanly when asked to: SIGTERM and SIGINT finish the step, then checkpoint.

SIGTERM is what spot and preemptible VMs, Cloud TPU maintenance, SLURM and Kubernetes send
before they kill a job; SIGINT is Ctrl-C. While :class:`StopSignals` is active the first of
either is a request: the training loop finishes the step in flight, writes a checkpoint of that
step (state, data position, EMA, loss scale; the metrics log is flushed) and returns, and the
command exits 0. A second signal stops the process at once (exit status 128 + the signal's
number), keeping the last complete checkpoint.

Several JAX processes must stop at the same step: the checkpoint is one collective write. A
signal may reach one process only, or all of them at different steps. The signalled process
raises a flag in ``jax.distributed``'s key-value store; every process reads the flag after each
step, and once it sees it reports its current step and waits until every process has reported;
the largest reported step is where all of them stop. No process can get past it: one that has
not seen the flag yet runs at most two steps beyond a waiting one (each step waits for the
collectives of the step two back) and looks at the flag after each of them. Where
``jax.distributed``'s own preemption service takes a SIGTERM before Python does, its agreement
(``reached_preemption_sync_point``, asked after every step) stops the run the same way.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_STOP_KEY = "jaxdet/stop/asked/"
_SEEN_KEY = "jaxdet/stop/seen/"
_RUNS = 0  # StopSignals made in this process so far


class StopSignals:
    """Context manager turning SIGTERM / SIGINT into a stop request for the training loop.

    ``requested``: the name of the first signal received (None: none). ``stop_now(step)``,
    called by every process after each step, says whether to checkpoint and stop after
    ``step``. With several processes, ``process_count`` / ``process_index`` / ``kv_client``
    default to jax.distributed's; ``timeout_s`` bounds the wait for the other processes'
    steps. Handlers are installed only in the main thread (Python delivers signals there);
    elsewhere the context does nothing.
    """

    def __init__(self, *, process_count: int | None = None, process_index: int | None = None,
                 kv_client=None, run_id: str | None = None, timeout_s: float = 600.0):
        global _RUNS
        _RUNS += 1
        self.requested: str | None = None
        self.timeout_ms = int(timeout_s * 1000)
        self._process_count = process_count
        self._index = process_index
        self._client = kv_client
        # every process makes the same sequence of training calls, so the same number names
        # this one's keys in each (the store outlives a call: a resume in the same process)
        self._run_id = f"{_RUNS}/" if run_id is None else run_id
        self._stop_at: int | None = None
        self._previous: dict[int, object] = {}
        self._last_step = 0

    # -- signals ----------------------------------------------------------------------------

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            print(f"\n{name} again: stopping now; the last complete checkpoint is kept",
                  file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.requested = name
        print(f"\n{name}: finishing step {self._last_step + 1}, then writing a checkpoint and "
              f"stopping ({name} again stops at once)", file=sys.stderr, flush=True)

    def request(self, name: str = "SIGTERM") -> None:
        """As if the signal ``name`` had arrived (for programs and tests)."""
        self.requested = self.requested or name

    # -- the decision -----------------------------------------------------------------------

    def _processes(self) -> int:
        if self._process_count is None:
            import jax

            self._process_count = jax.process_count()
        return self._process_count

    def _kv(self):
        if self._client is None:
            from jax._src import distributed  # the client jax.distributed started

            self._client = distributed.global_state.client
        return self._client

    def stop_now(self, step: int) -> bool:
        """True when training should checkpoint and stop after ``step`` (all processes get
        True at the same step)."""
        self._last_step = step
        count = self._processes()
        if count == 1:
            return self.requested is not None
        if self._stop_at is None and (self.requested is not None or self._asked(step)):
            self._stop_at = self._agree(step, count)
        if self._stop_at is not None and step >= self._stop_at:
            self.requested = self.requested or "a signal to another process"
            return True
        if self._jax_preemption(step):
            self.requested = self.requested or "SIGTERM"
            return True
        return False

    def _asked(self, step: int) -> bool:
        """Whether any process has asked to stop (the key-value store's flag)."""
        try:
            self._kv().key_value_try_get(_STOP_KEY + self._run_id)
        except Exception as err:  # noqa: BLE001 - the runtime's error type is private
            if "NOT_FOUND" not in str(err):
                raise
            return False
        return True

    def _agree(self, step: int, count: int) -> int:
        """Raise the flag (if this process was signalled), report ``step``, wait until every
        process has reported its own, and return the largest: the stop step."""
        client = self._kv()
        if self.requested is not None:
            try:  # one flag, whoever asks first
                client.key_value_set(_STOP_KEY + self._run_id, "1")
            except Exception as err:  # noqa: BLE001
                if "ALREADY_EXISTS" not in str(err):
                    raise
        import jax

        index = jax.process_index() if self._index is None else self._index
        client.key_value_set(f"{_SEEN_KEY}{self._run_id}{index}", str(step))
        seen = [int(client.blocking_key_value_get(f"{_SEEN_KEY}{self._run_id}{i}",
                                                  self.timeout_ms)) for i in range(count)]
        return max(seen)

    def _jax_preemption(self, step: int) -> bool:
        """True at the step jax.distributed's preemption service agreed on, where it took a
        SIGTERM itself."""
        from jax._src import distributed

        if distributed.global_state.preemption_sync_manager is None:
            return False
        from jax.experimental import multihost_utils

        return bool(multihost_utils.reached_preemption_sync_point(step))


__all__ = ["STOP_SIGNALS", "StopSignals"]
