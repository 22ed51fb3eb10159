"""How the ``jaxdet`` command reports what goes wrong: log lines above progress bars, one
line for a failure in a background thread (orbax's writers) instead of their tracebacks, and
file-system failures (a full disk, a read-only folder, a file where a folder should be) in one
line that says what was kept."""

from __future__ import annotations

import errno
import logging
import re
import sys

from jaxdet.train import step_memory


def logs_above_progress_bars():
    """On a terminal, log lines printed above a running progress bar instead of glued onto
    it (tqdm's logging redirect); in a log file there are no bars to avoid."""
    import contextlib

    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    return logging_redirect_tqdm()


def quiet_background_errors() -> None:
    """A failure in a background thread (orbax's checkpoint writers, its event loops) also
    reaches the main thread, which reports it in one line: the threads' own tracebacks, the
    event loops' follow-up errors and the libraries' logged tracebacks go to the debug log
    instead of the terminal."""
    import threading

    def thread_hook(args) -> None:
        logging.getLogger("jaxdet").debug("in thread %s", getattr(args.thread, "name", "?"),
                                          exc_info=(args.exc_type, args.exc_value,
                                                    args.exc_traceback))

    def unraisable_hook(args) -> None:
        logging.getLogger("jaxdet").debug("unraisable in %r: %s", args.object, args.exc_value)

    def main_thread_only(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and (record.threadName != "MainThread"
                                                or record.exc_info):
            logging.getLogger("jaxdet").debug("in thread %s: %s", record.threadName,
                                              record.getMessage())
            return False
        return True

    threading.excepthook = thread_hook
    sys.unraisablehook = unraisable_hook
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    for name in ("absl", "orbax"):
        logger = logging.getLogger(name)
        if not any(getattr(f, "__name__", "") == "main_thread_only" for f in logger.filters):
            logger.addFilter(main_thread_only)  # once, however often main() runs in a process


def out_of_memory_line(err: Exception) -> str | None:
    """XLA's report of a program that does not fit in memory (``RESOURCE_EXHAUSTED: Out of
    memory allocating N bytes``) in one line, with what to lower; None for other errors."""
    match = re.search(r"Out of memory (?:while trying to allocate|allocating) (\d+) bytes",
                      str(err))
    if not match:
        return None
    return (f"out of memory: a program of this run needs {int(match[1]) / 2**30:.1f} GiB at "
            f"once, more than the device has; {step_memory.REMEDY}")


def disk_full_line(err: Exception) -> str | None:
    """orbax's report of a full disk (TensorStore's RESOURCE_EXHAUSTED) in one line; an
    out-of-memory error (also RESOURCE_EXHAUSTED) is :func:`out_of_memory_line`'s."""
    text = str(err)
    if "RESOURCE_EXHAUSTED" not in text and "No space left" not in text:
        return None
    if out_of_memory_line(err):
        return None
    match = re.search(r'"([^"]*?)/(\d+)\.orbax-checkpoint-tmp', text)
    where = f" writing checkpoint step {match[2]} in {match[1]}" if match else ""
    return (f"the disk is full{where}; the checkpoints written before are complete and kept "
            "(the one being written is not used): free space and run the same command to "
            "resume")


def os_error_line(err: OSError) -> str:
    """A file-system failure in one line, with what survives it where that is known."""
    where = f": {err.filename}" if err.filename else ""
    line = f"{err.strerror or err}{where}"
    if err.errno == errno.ENOSPC:
        line += ("; nothing written so far is lost (a checkpoint being written when the disk "
                 "filled is not used): free space and run the same command again")
    elif err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        line += "; choose a folder this process may write (--workdir / --out)"
    elif err.errno in (errno.EEXIST, errno.ENOTDIR):
        line += "; a file stands where a folder is needed"
    return line


__all__ = ["disk_full_line", "out_of_memory_line", "logs_above_progress_bars", "os_error_line",
           "quiet_background_errors"]
