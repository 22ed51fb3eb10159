"""The loader's worker processes: forked from one server that has imported the loader once,
handing chunks back through shared memory, in order.

A worker started with ``spawn`` is a fresh interpreter that imports the data modules, grain
and, through grain, jax and orbax: about 1.7 s of one core each, so 12 workers on a small host
take tens of seconds of CPU before the first batch. Here the workers are forked from
multiprocessing's ``forkserver``, which imports those modules once (``set_forkserver_preload``)
before it forks anything; a worker then starts in milliseconds and shares the server's
imported code. The server is started on the first pool of a process and serves every later
one.

Each worker ``k`` of ``n`` makes chunks ``k, k + n, k + 2n, ...`` with ``chunk_map`` (chunk
index -> ``{"arrays": {name: ndarray}, "rest": [...]}``, ``data.chunks.pack``), writes the
chunk's arrays into one shared-memory file and sends the file's layout and the rest through a
pipe; the main process reads the workers round-robin (so the chunks come in index order), maps
the file and unlinks it at once, so its arrays are views of memory nobody else holds and the
memory goes when they do. A worker makes at most two chunks ahead of what the main process has
taken (``_AHEAD``): one waiting, one in the making.

The chunk map is pickled with cloudpickle (closures and lambdas pass, as with grain). A worker
changes to the main process's working directory (the server's may differ) and ignores Ctrl-C
(the training process handles it, then closes the workers). A worker's exception is raised in
the main process with the worker's traceback attached; a worker that dies (killed, out of
memory) is named with its exit code.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import secrets
import signal
import tempfile
import traceback
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

# Imported once by the fork server, before it forks any worker: the sample pipeline and
# everything it pulls in (grain, jax, PIL, numpy), and the main script (as ``spawn`` would
# import it in every worker; a script run directly must guard its work with
# ``if __name__ == "__main__":``, as with ``spawn``).
PRELOAD = ("jaxdet.data.loader", "jaxdet.data.eval_loader", "jaxdet.data.build", "__main__")

_AHEAD = 2  # chunks a worker may make before the main process takes the first of them
_ALIGN = 64
_POLL_S = 0.5


def _shared_dir() -> Path:
    """Where chunk files live: RAM-backed ``/dev/shm`` on Linux, else the temp folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _layout(arrays: dict[str, np.ndarray]) -> tuple[dict[str, tuple], int]:
    """name -> (dtype, shape, byte offset), each offset aligned; and the total size."""
    out, size = {}, 0
    for name, array in arrays.items():
        out[name] = (array.dtype, array.shape, size)
        size += -(-array.nbytes // _ALIGN) * _ALIGN
    return out, size


def write_shared(arrays: dict[str, np.ndarray], path: Path) -> dict[str, Any]:
    """Writes ``arrays`` into a new file at ``path`` (shared memory); returns its layout for
    ``read_shared``. Space is reserved first, so a full ``/dev/shm`` is an OSError here, not a
    bus error while writing."""
    layout, size = _layout(arrays)
    if size == 0:
        return {"path": None, "size": 0, "arrays": layout}
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            os.unlink(path)
            raise OSError(f"no room for a {size / 2**20:.1f} MiB chunk of samples in "
                          f"{path.parent} ({e.strerror}); in a container, give it more shared "
                          "memory (docker run --shm-size=8g), or lower data.worker_count or "
                          "train.batch_size") from e
        with mmap.mmap(fd, size) as mapped:
            for name, array in arrays.items():
                _, shape, offset = layout[name]
                view = np.ndarray(shape, array.dtype, buffer=mapped, offset=offset)
                view[...] = array
                del view
    finally:
        os.close(fd)
    return {"path": str(path), "size": size, "arrays": layout}


def read_shared(meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The arrays ``write_shared`` wrote, as views of the mapped file, which is unlinked at
    once (the memory lives as long as the arrays)."""
    if meta["path"] is None:
        return {name: np.empty(shape, dtype) for name, (dtype, shape, _) in
                meta["arrays"].items()}
    fd = os.open(meta["path"], os.O_RDWR)
    try:
        mapped = mmap.mmap(fd, meta["size"])
    finally:
        os.close(fd)
        os.unlink(meta["path"])
    return {name: np.ndarray(shape, dtype, buffer=mapped, offset=offset)
            for name, (dtype, shape, offset) in meta["arrays"].items()}


def _discard(meta: dict[str, Any]) -> None:
    if meta.get("path"):
        try:
            os.unlink(meta["path"])
        except FileNotFoundError:
            pass


def _work(pickled_map: bytes, worker: int, workers: int, chunks: int, conn, credits,
          stop, cwd: str, prefix: str) -> None:
    """A worker's life: make chunks ``worker, worker + workers, ...`` below ``chunks``, each
    after taking a credit, and send them; stop when told or when the fork server (and so the
    main process) is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.chdir(cwd)
    server = os.getppid()
    chunk = worker
    try:
        chunk_map = cloudpickle.loads(pickled_map)
        for chunk in range(worker, chunks, workers):
            while not credits.acquire(timeout=_POLL_S):
                if stop.is_set() or os.getppid() != server:
                    return
            if stop.is_set():
                return
            packed = chunk_map(chunk)
            meta = write_shared(packed["arrays"], Path(f"{prefix}-{chunk}"))
            conn.send(("chunk", chunk, meta, packed["rest"]))
    except BaseException as e:  # noqa: BLE001 - every failure is reported to the main process
        try:
            error = cloudpickle.dumps(e)
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            error = None
        try:
            conn.send(("error", chunk, error, traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass
    finally:
        conn.close()


def _context() -> multiprocessing.context.BaseContext:
    """The fork server, with its preload; ``spawn`` where there is none (Windows)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


class WorkerError(RuntimeError):
    """A loader worker died without reporting an exception (killed, out of memory)."""


class ChunkPool(Iterator[dict[str, Any]]):
    """Chunks ``0 .. chunks - 1`` of ``chunk_map``, made by ``workers`` worker processes,
    yielded in index order as ``{"arrays": {...}, "rest": [...]}`` (arrays in shared memory).
    ``close()`` stops the workers and removes what they left."""

    def __init__(self, chunk_map: Callable[[int], dict[str, Any]], *, chunks: int,
                 workers: int):
        if workers < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {workers}")
        context = _context()
        self._chunks = chunks
        self._next = 0
        directory = _shared_dir()
        tag = f"jaxdet-chunk-{os.getpid()}-{secrets.token_hex(4)}"
        self._stop = context.Event()
        pickled = cloudpickle.dumps(chunk_map)
        self._conns, self._credits, self._processes = [], [], []
        # registered first: workers started before a failing start are stopped too
        self._finalizer = weakref.finalize(self, _shut_down, self._processes, self._conns,
                                           self._stop, directory, tag)
        for k in range(workers):
            receive, send = context.Pipe(duplex=False)
            credits = context.Semaphore(_AHEAD)
            process = context.Process(
                target=_work, name=f"jaxdet-loader-worker-{k}", daemon=True,
                args=(pickled, k, workers, chunks, send, credits, self._stop, os.getcwd(),
                      str(directory / f"{tag}-{k}")))
            self._conns.append(receive)
            process.start()
            send.close()  # the worker holds the only write end: its exit reads as EOF here
            self._credits.append(credits)
            self._processes.append(process)

    @property
    def next_chunk(self) -> int:
        """The index of the chunk ``next()`` returns."""
        return self._next

    def __next__(self) -> dict[str, Any]:
        if self._next >= self._chunks or not self._finalizer.alive:
            raise StopIteration
        worker = self._next % len(self._processes)
        message = self._receive(worker)
        if message[0] == "error":
            self.close()
            raise _worker_exception(worker, *message[1:])
        _, chunk, meta, rest = message
        if chunk != self._next:
            raise AssertionError(f"loader worker {worker} sent chunk {chunk}, "
                                 f"expected {self._next}")
        self._credits[worker].release()
        self._next += 1
        return {"arrays": read_shared(meta), "rest": rest}

    def _receive(self, worker: int) -> tuple:
        conn, process = self._conns[worker], self._processes[worker]
        while True:
            try:
                if conn.poll(_POLL_S):
                    return conn.recv()
            except EOFError:
                pass
            else:
                if process.exitcode is None:
                    continue
            process.join(timeout=5)
            code = process.exitcode
            self.close()
            signal_note = f" (killed by signal {-code})" if code and code < 0 else ""
            raise WorkerError(
                f"loader worker {worker} exited with code {code}{signal_note} before sending "
                f"chunk {self._next}; if the machine ran out of memory, lower "
                "data.worker_count")

    def close(self) -> None:
        """Stops the workers and removes the chunk files nobody took. Idempotent."""
        self._finalizer()


def _worker_exception(worker: int, chunk: int, pickled: bytes | None,
                      worker_traceback: str) -> BaseException:
    """The worker's own exception (its traceback as a note), or a WorkerError with it."""
    if pickled is not None:
        try:
            error = cloudpickle.loads(pickled)
        except Exception:  # noqa: BLE001 - fall back to the text
            error = None
        if isinstance(error, BaseException):
            error.add_note(f"in loader worker {worker}, making chunk {chunk}:\n"
                           f"{worker_traceback}")
            return error
    return WorkerError(f"loader worker {worker} failed making chunk {chunk}:\n"
                       f"{worker_traceback}")


def _shut_down(processes, conns, stop, directory: Path, tag: str) -> None:
    stop.set()
    for process in processes:
        process.join(timeout=2 * _POLL_S + 1)
    for process in processes:
        if process.exitcode is None:
            process.terminate()
            process.join(timeout=5)
    for conn in conns:
        try:
            while conn.poll(0):
                message = conn.recv()
                if message[0] == "chunk":
                    _discard(message[2])
        except (EOFError, OSError):
            pass
        conn.close()
    for left in directory.glob(f"{tag}-*"):
        left.unlink(missing_ok=True)


__all__ = ["PRELOAD", "ChunkPool", "WorkerError", "read_shared", "write_shared"]
