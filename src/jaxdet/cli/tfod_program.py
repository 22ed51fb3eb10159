"""How the TF OD API's scripts run in jaxdet (``model_main_tf2``, ``exporter_main_v2``,
``export_tflite_graph_tf2``): their flags parsed as absl parses them (``cli.tfod_flags``),
``--help`` and flag errors, absl's logging flags, required flags, and jaxdet's one-line errors
around the script's body."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from jaxdet import files
from jaxdet.cli.tfod_flags import Flag, FlagError, HelpRequested, parse_flags
from jaxdet.config.loader import ConfigError

log = logging.getLogger("jaxdet")


def run_program(program: str, flags: tuple[Flag, ...], body: Callable[[dict[str, Any]], int],
                argv: list[str] | None, *, reexec: bool) -> int:
    """Parse ``flags`` from ``argv`` and run ``body(values)`` with jaxdet's one-line errors."""
    from jaxdet.cli.main import report_errors

    if argv is None:
        if reexec:
            from jaxdet.backends.process import reexec_with_fast_allocator

            reexec_with_fast_allocator()
        argv = sys.argv[1:]
    values = parse_or_exit(program, flags, argv)
    if isinstance(values, int):
        return values
    start_logging(program, values)
    return report_errors(lambda: body(values))


def parse_or_exit(program: str, flags: tuple[Flag, ...], argv: list[str]) -> dict | int:
    """The flags' values, or the exit code after printing ``--help`` (0) or a flag error (2)."""
    try:
        return parse_flags(program, flags, argv)
    except HelpRequested as request:
        try:
            print(request.text)
        except BrokenPipeError:  # `model_main_tf2 --help | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except FlagError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def start_logging(program: str, values: dict[str, Any]) -> None:
    """Log to standard error (debug with ``--v=1`` or more) and, with ``--log_dir``, also to
    ``LOG_DIR/<program>.log`` as absl does."""
    from jaxdet.cli.main import setup_logging

    setup_logging(debug=values["verbosity"] >= 1)
    if values["_positional"]:
        log.warning("ignoring %s: not flags (TF's %s.py ignores them too)",
                    " ".join(repr(a) for a in values["_positional"]), program)
    if values["log_dir"]:
        files.makedirs(values["log_dir"])
        handler = logging.FileHandler(files.join(values["log_dir"], f"{program}.log"))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: "
                                               "%(message)s"))
        logging.getLogger().addHandler(handler)


def require(values: dict[str, Any], *names: str) -> None:
    """ConfigError naming the required flags that have no value (absl's mark_flag_as_required)."""
    missing = [f"--{name}" for name in names if not values[name]]
    if missing:
        raise ConfigError(f"{' and '.join(missing)} must have a value (flags of TF's script: "
                          "--help lists them)")


__all__ = ["parse_or_exit", "require", "run_program", "start_logging"]
