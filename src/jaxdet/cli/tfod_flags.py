"""Command-line flags as the TF OD API's scripts take them (absl's syntax), for jaxdet's
``model_main_tf2``, ``exporter_main_v2`` and ``export_tflite_graph_tf2``.

absl accepts ``--name=value``, ``--name value``, a single dash (``-name=value``), booleans
as ``--name``, ``--noname`` or ``--name=true|false|1|0``, ``--flagfile=FILE`` (more flags,
one per line) and ``--help`` / ``--helpfull``. The logging flags every absl program takes
(``--alsologtostderr``, ``--logtostderr``, ``--v``, ...) are accepted here too: jaxdet logs
to standard error anyway. An unknown flag or a bad value is a :class:`FlagError` naming the
flag (with the closest known name).

    values = parse_flags("model_main_tf2", MODEL_MAIN_FLAGS, sys.argv[1:])
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class FlagError(ValueError):
    """A flag that is unknown, lacks a value or has a bad one (one line, the flag named)."""


class HelpRequested(Exception):  # noqa: N818 (not an error: --help was given)
    """``--help``: the text to print, then exit 0."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


@dataclass(frozen=True)
class Flag:
    """One flag: its absl name, type (``str``, ``int``, ``float`` or ``bool``), default and
    help (what it does in jaxdet)."""

    name: str
    kind: type
    default: Any
    help: str


# absl's logging flags: jaxdet logs to standard error whatever they say; -v 1 or more logs
# debug messages
LOGGING_FLAGS = (
    Flag("logtostderr", bool, False, "accepted (jaxdet logs to standard error)"),
    Flag("alsologtostderr", bool, False, "accepted (jaxdet logs to standard error)"),
    Flag("stderrthreshold", str, "fatal", "accepted (jaxdet logs to standard error)"),
    Flag("showprefixforinfo", bool, True, "accepted"),
    Flag("verbosity", int, -1, "1 or more: debug logging (absl's -v)"),
    Flag("log_dir", str, "", "also write the log to LOG_DIR/<program>.log"),
)
_ALIASES = {"v": "verbosity"}
_TRUE, _FALSE = ("true", "t", "1", "yes", "y"), ("false", "f", "0", "no", "n")


def parse_flags(program: str, flags: Sequence[Flag], argv: Sequence[str]) -> dict[str, Any]:
    """``{name: value}`` for every flag of ``flags`` and :data:`LOGGING_FLAGS` (defaults
    where not given), from ``argv`` (the arguments after the program name), with
    ``_given`` (the names set on the command line) and ``_positional`` (arguments that are
    not flags: TF's scripts ignore them, e.g. the ``True`` of ``--use_side_inputs True``).
    Raises FlagError or HelpRequested."""
    known = {f.name: f for f in (*flags, *LOGGING_FLAGS)}
    values = {name: f.default for name, f in known.items()}
    given: set[str] = set()
    positional: list[str] = []
    _parse_into(program, known, list(argv), values, given, positional, depth=0)
    values["_given"] = frozenset(given)
    values["_positional"] = tuple(positional)
    return values


def _parse_into(program: str, known: dict[str, Flag], args: list[str], values: dict,
                given: set[str], positional: list[str], depth: int) -> None:
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":  # absl: the rest are arguments, not flags
            positional.extend(args[i:])
            return
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)  # TF's scripts ignore them; the caller says so
            continue
        name, has_value, value = arg.lstrip("-").partition("=")
        name = _ALIASES.get(name, name)
        if name in ("help", "helpfull", "helpshort", "h", "?"):
            raise HelpRequested(help_text(program, [f for f in known.values()
                                                    if f not in LOGGING_FLAGS]))
        if name == "flagfile":
            if not has_value:
                if i >= len(args):
                    raise FlagError(f"{program}: --flagfile needs a file name")
                value, i = args[i], i + 1
            if depth > 8:
                raise FlagError(f"{program}: --flagfile={value}: flag files nest too deep")
            _parse_into(program, known, _flagfile_args(program, value), values, given,
                        positional, depth + 1)
            continue
        flag = known.get(name)
        negated = None
        if flag is None and name.startswith("no") and known.get(name[2:], None) is not None \
                and known[name[2:]].kind is bool:
            flag, negated = known[name[2:]], True
        if flag is None:
            raise FlagError(f"{program}: unknown flag --{name}{_suggestion(name, known)}")
        if flag.kind is bool:
            if negated:
                if has_value:
                    raise FlagError(f"{program}: --{name} takes no value")
                values[flag.name] = False
            else:
                values[flag.name] = _boolean(program, flag, value) if has_value else True
        else:
            if not has_value:
                if i >= len(args):
                    raise FlagError(f"{program}: --{flag.name} needs a value")
                value, i = args[i], i + 1
            values[flag.name] = _typed(program, flag, value)
        given.add(flag.name)


def _flagfile_args(program: str, path: str) -> list[str]:
    """The flags of an absl flag file: one per line (``--name=value``), ``#`` and ``//``
    lines are comments."""
    from jaxdet import files

    try:
        text = files.read_text(path)
    except OSError as err:
        raise FlagError(f"{program}: --flagfile={path}: {err.strerror or err}") from None
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "//")):
            out.append(line)
    return out


def _boolean(program: str, flag: Flag, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise FlagError(f"{program}: --{flag.name}={value}: not a boolean (true or false)")


def _typed(program: str, flag: Flag, value: str) -> Any:
    if flag.kind is str:
        return value
    try:
        return flag.kind(value)
    except ValueError:
        raise FlagError(f"{program}: --{flag.name}={value}: not an "
                        f"{'integer' if flag.kind is int else 'number'}") from None


def _suggestion(name: str, known: dict[str, Flag]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean --{close[0]}?)" if close else ""


def help_text(program: str, flags: Sequence[Flag]) -> str:
    """``--help``: every flag with its default and what it does in jaxdet."""
    lines = [f"usage: {program} --flag=value ...  (the TF OD API's {program}.py flags, run by "
             "jaxdet)", ""]
    for f in flags:
        default = "" if f.default is None else f" (default: {f.default})"
        lines.append(f"  --{f.name}{default}")
        lines.append(f"      {f.help}")
    lines.append("  also: --flagfile=FILE, --alsologtostderr, --logtostderr, --v=N, --log_dir=DIR")
    return "\n".join(lines)


__all__ = ["LOGGING_FLAGS", "Flag", "FlagError", "HelpRequested", "help_text", "parse_flags"]
