"""A reader for the protobuf text format (``pipeline.config``, label-map ``.pbtxt`` files).

No schema is needed: :func:`parse_pbtxt` turns text into a tree of :class:`Message` objects, each
an ordered list of ``(name, value)`` fields, where a value is a nested ``Message``, a ``str``
(quoted string), an ``int``, a ``float``, a ``bool`` (``true``/``false``/``True``/``t``...) or an
:class:`EnumValue` (an unquoted identifier such as ``RELU_6``).

Supported syntax: ``name: value``, ``name { ... }``, ``name: { ... }``, ``name < ... >``, list
values ``name: [1, 2]`` and ``name [{...}, {...}]``, ``#`` comments, single or double quoted
strings with C escapes and adjacent-literal concatenation, ints (decimal, hex, octal, negative),
floats (``1e-8``, ``.04``, ``-inf``, ``nan``, ``1.0f``), and optional ``,``/``;`` separators.

A :class:`Message` remembers which fields were read (:meth:`Message.take`), so a mapper can list
what it did not consume (:meth:`Message.unread`) and never drop a field silently. Bound to
its protobuf message type (``descriptor``, see ``config/tfod_proto.py``), an unset field
reads as that message's default, as in TF.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


class PbtxtError(ValueError):
    """Text that is not valid protobuf text format; the message names the line and column."""


class EnumValue(str):
    """An unquoted identifier value, e.g. ``RELU_6`` or ``SIGMOID`` (a protobuf enum)."""

    def __repr__(self) -> str:
        return f"EnumValue({str(self)!r})"


_NO_DEFAULT = object()


def _is_repeated(fd: Any) -> bool:
    repeated = getattr(fd, "is_repeated", None)
    return bool(repeated) if repeated is not None else fd.label == 3  # LABEL_REPEATED


def _proto_default(fd: Any) -> Any:
    """A scalar field descriptor's default as this parser reads values: an enum by name, a
    float32 at the precision it was written (0.999, not 0.99900001)."""
    value = fd.default_value
    if fd.enum_type is not None:
        return EnumValue(fd.enum_type.values_by_number[value].name)
    if fd.cpp_type == 6:  # CPPTYPE_FLOAT
        return float(format(value, ".7g"))
    return value


def _same_default(given: Any, proto: Any) -> bool:
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if number(given) and number(proto):
        return given == proto or math.isclose(given, proto, rel_tol=1e-6)
    if isinstance(proto, EnumValue):
        return isinstance(given, str) and str(given) == str(proto)
    return type(given) is type(proto) and given == proto


@dataclass
class Message:
    """One protobuf message: its fields in file order, and where it starts.

    ``path`` is the dotted field path from the root (``model.ssd.box_coder``), used in errors.
    """

    path: str = ""
    line: int = 0
    fields: list[tuple[str, Any, int]] = field(default_factory=list)
    _read: set[str] = field(default_factory=set, repr=False)
    # the protobuf Descriptor of this message's type (None: no schema), and a list shared by
    # a whole bound tree that collects (path, default the code gave, the message's default)
    # wherever the two differ
    descriptor: Any = field(default=None, repr=False)
    drift: list | None = field(default=None, repr=False)

    def names(self) -> list[str]:
        """Distinct field names, in order of first appearance."""
        return list(dict.fromkeys(name for name, _, _ in self.fields))

    def has(self, name: str) -> bool:
        return any(n == name for n, _, _ in self.fields)

    def all(self, name: str) -> list[Any]:
        """Every value of ``name`` (a repeated field), in order; marks it read."""
        self._read.add(name)
        return [value for n, value, _ in self.fields if n == name]

    def take(self, name: str, default: Any = _NO_DEFAULT) -> Any:
        """The value of singular field ``name`` (the last one, as protobuf merges); marks it
        read. When absent: None without ``default``; with one, the protobuf message's own
        default where the message is bound (a ``default`` that differs from it is noted in
        ``drift``), else ``default``."""
        values = self.all(name)
        if values:
            return values[-1]
        if default is _NO_DEFAULT:
            return None
        scalar = self._scalar_field(name)
        if scalar is None:
            return default
        proto = _proto_default(scalar)
        if self.drift is not None and not _same_default(default, proto):
            self.drift.append((f"{self.path}.{name}" if self.path else name, default, proto))
        return proto

    def _scalar_field(self, name: str) -> Any:
        """The field descriptor of singular scalar field ``name`` (None: unbound, unknown, a
        message or repeated)."""
        fd = None if self.descriptor is None else self.descriptor.fields_by_name.get(name)
        if fd is None or fd.message_type is not None or _is_repeated(fd):
            return None
        return fd

    def child(self, name: str) -> Message:
        """An empty sub-message ``name`` (absent from the file: all its defaults), bound as
        the field's message type is."""
        fd = None if self.descriptor is None else self.descriptor.fields_by_name.get(name)
        return Message(path=f"{self.path}.{name}" if self.path else name, line=self.line,
                       descriptor=None if fd is None else fd.message_type, drift=self.drift)

    def line_of(self, name: str) -> int:
        lines = [line for n, _, line in self.fields if n == name]
        return lines[-1] if lines else self.line

    def oneof(self) -> tuple[str, Any]:
        """For a message that holds exactly one field (a protobuf ``oneof`` wrapper such as
        ``box_coder { faster_rcnn_box_coder {...} }``): its name and value, marked read."""
        names = self.names()
        if len(names) != 1:
            raise PbtxtError(
                f"{self.path or 'the config'} (line {self.line}) must set exactly one of its "
                f"choices, found {names or 'none'}"
            )
        return names[0], self.take(names[0])

    def unread(self) -> Iterator[tuple[str, int]]:
        """Dotted paths (and lines) of fields never read, recursing into read sub-messages."""
        for name in self.names():
            child_path = f"{self.path}.{name}" if self.path else name
            if name not in self._read:
                yield child_path, self.line_of(name)
                continue
            for value in self.all_quietly(name):
                if isinstance(value, Message):
                    yield from value.unread()

    def all_quietly(self, name: str) -> list[Any]:
        """Every value of ``name`` without marking it read."""
        return [value for n, value, _ in self.fields if n == name]

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict: a field seen once maps to its value, a repeated one to a list."""
        out: dict[str, Any] = {}
        for name in self.names():
            values = [v.to_dict() if isinstance(v, Message) else v
                      for v in self.all_quietly(name)]
            out[name] = values[0] if len(values) == 1 else values
        return out


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?)
                (?![A-Za-z_0-9]))
  | (?P<ident>[-+]?[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)
  | (?P<punct>[{}<>\[\]:,;])
    """,
    re.VERBOSE,
)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "'": "'", '"': '"', "\\": "\\", "a": "\a",
            "b": "\b", "f": "\f", "v": "\v", "?": "?"}
_TRUE = {"true", "True", "t"}
_FALSE = {"false", "False", "f"}


@dataclass
class _Token:
    kind: str
    text: str
    line: int
    col: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PbtxtError(f"line {line}, column {pos - line_start + 1}: unexpected "
                             f"character {text[pos]!r}")
        kind = m.lastgroup
        if kind != "ws":
            tokens.append(_Token(kind, m.group(), line, pos - line_start + 1))
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = pos + m.group().rindex("\n") + 1
        pos = m.end()
    return tokens


def _unescape(literal: str, token: _Token) -> str:
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1:]).group()
            out.append(chr(int(digits, 8)))
            i += 1 + len(digits)
        elif nxt == "x":
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:])
            if digits is None:
                raise PbtxtError(f"line {token.line}: bad \\x escape in {literal}")
            out.append(chr(int(digits.group(), 16)))
            i += 2 + len(digits.group())
        else:
            raise PbtxtError(f"line {token.line}: unknown escape \\{nxt} in {literal}")
    return "".join(out)


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def next(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise PbtxtError(f"unexpected end of text, expected {what}")
        self.i += 1
        return token

    def expect(self, text: str) -> _Token:
        token = self.next(f"'{text}'")
        if token.text != text:
            raise PbtxtError(f"line {token.line}, column {token.col}: expected '{text}', "
                             f"found '{token.text}'")
        return token

    def message(self, path: str, line: int, close: str | None) -> Message:
        msg = Message(path=path, line=line)
        while True:
            token = self.peek()
            if token is None:
                if close is not None:
                    raise PbtxtError(f"{path} (opened on line {line}) is never closed with "
                                     f"'{close}'")
                return msg
            if close is not None and token.text == close:
                self.i += 1
                return msg
            if token.kind != "ident" or token.text[0] in "+-":
                raise PbtxtError(f"line {token.line}, column {token.col}: expected a field "
                                 f"name, found '{token.text}'")
            self.i += 1
            name = token.text
            child_path = f"{path}.{name}" if path else name
            for value in self.field_values(child_path):
                msg.fields.append((name, value, token.line))
            nxt = self.peek()
            if nxt is not None and nxt.text in ",;":
                self.i += 1

    def field_values(self, path: str) -> list[Any]:
        token = self.next(f"a value for {path}")
        colon = token.text == ":"
        if colon:
            token = self.next(f"a value for {path}")
        if token.text == "[":
            values: list[Any] = []
            if self.peek() is not None and self.peek().text == "]":
                self.i += 1
                return values
            while True:
                values.append(self.value(self.next(f"a list item of {path}"), path, colon))
                sep = self.next(f"',' or ']' in the list of {path}")
                if sep.text == "]":
                    return values
                if sep.text != ",":
                    raise PbtxtError(f"line {sep.line}, column {sep.col}: expected ',' or "
                                     f"']' in the list of {path}, found '{sep.text}'")
        if not colon and token.text not in "{<":
            raise PbtxtError(f"line {token.line}, column {token.col}: expected ':' or '{{' "
                             f"after {path}, found '{token.text}'")
        return [self.value(token, path, colon)]

    def value(self, token: _Token, path: str, scalar_ok: bool) -> Any:
        if token.text in ("{", "<"):
            return self.message(path, token.line, "}" if token.text == "{" else ">")
        if not scalar_ok:
            raise PbtxtError(f"line {token.line}: {path} needs a ':' before a scalar value")
        if token.kind == "string":
            parts = [_unescape(token.text, token)]
            while self.peek() is not None and self.peek().kind == "string":
                nxt = self.next("a string")
                parts.append(_unescape(nxt.text, nxt))
            return "".join(parts)
        if token.kind == "number":
            return _number(token.text)
        if token.kind == "ident":
            word = token.text
            if word in _TRUE:
                return True
            if word in _FALSE:
                return False
            sign = -1.0 if word.startswith("-") else 1.0
            bare = word.lstrip("+-").lower()
            if bare in ("inf", "infinity"):
                return sign * math.inf
            if bare == "nan":
                return math.nan
            if word[0] in "+-":
                raise PbtxtError(f"line {token.line}: '{word}' is not a number")
            return EnumValue(word)
        raise PbtxtError(f"line {token.line}, column {token.col}: expected a value for "
                         f"{path}, found '{token.text}'")


def _number(text: str) -> int | float:
    body = text.rstrip("fF") if not text.lower().lstrip("+-").startswith("0x") else text
    if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", body):
        return int(body, 16)
    if re.fullmatch(r"[-+]?\d+", body) and body != text:  # "1f" is a float
        return float(body)
    if re.fullmatch(r"[-+]?0\d+", body):
        return int(body, 8)
    if re.fullmatch(r"[-+]?\d+", body):
        return int(body)
    return float(body)


def parse_pbtxt(text: str) -> Message:
    """Parses protobuf text format into a root :class:`Message`.

    Raises:
      PbtxtError: the text is malformed; the message gives the line and column.
    """
    return _Parser(text).message("", 1, None)
