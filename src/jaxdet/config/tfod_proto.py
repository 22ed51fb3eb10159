"""A pipeline.config against the TF OD API's own messages (the vendored ``.proto`` files of
``config/tfod_protos``, compiled to ``descriptors.binpb``).

:func:`check_pipeline_text` parses the text with protobuf's ``text_format`` as TF does: a
field the messages lack, an enum value they lack, a value of the wrong type is one line naming
the file, line, column and field path, with the closest name where one is close.
:func:`bind_pipeline` attaches each message's type to the parsed tree, so that every field
jaxdet reads with a default takes the message's default (``pbtxt.Message.take``).
"""

from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from jaxdet.config.pbtxt import Message
from jaxdet.config.tfod_common import TfodConfigError

DESCRIPTORS = Path(__file__).parent / "tfod_protos" / "descriptors.binpb"
PIPELINE = "object_detection.protos.TrainEvalPipelineConfig"
PACKAGE = "object_detection.protos."


class TfodProtoError(TfodConfigError):
    """Text TF's own parser refuses; the message names the file, line, column and field."""


@functools.cache
def _pool() -> descriptor_pool.DescriptorPool:
    files = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTORS.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        pool.Add(proto)
    return pool


def message_descriptor(full_name: str = PIPELINE) -> Any:
    """The protobuf Descriptor of a TF OD API message (``object_detection.protos.Ssd``...)."""
    return _pool().FindMessageTypeByName(full_name)


def pipeline_message() -> Any:
    """An empty ``TrainEvalPipelineConfig`` message (protobuf's own class)."""
    return message_factory.GetMessageClass(message_descriptor())()


def bind_pipeline(root: Message, drift: list | None = None) -> None:
    """Bind ``root`` (a parsed pipeline.config) and every sub-message to its message type;
    ``drift`` (a list) collects defaults given by code that differ from TF's."""
    _bind(root, message_descriptor(), drift)


def _bind(msg: Message, descriptor: Any, drift: list | None) -> None:
    msg.descriptor, msg.drift = descriptor, drift
    for name, value, _ in msg.fields:
        fd = descriptor.fields_by_name.get(name)
        if isinstance(value, Message) and fd is not None and fd.message_type is not None:
            _bind(value, fd.message_type, drift)


_NO_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "(\w+)"')
_NO_ENUM = re.compile(r'Enum type "([\w.]+)" has no value named (\w+)')
_LOCATION = re.compile(r"^(\d+):(\d+) : (?:'.*?': )?")
_TYPES = {"integer": "an integer", "double": "a number", "float": "a number",
          "bool": "true or false", "string": "a quoted string"}


def check_pipeline_text(text: str, root: Message, source: str) -> None:
    """Raise :class:`TfodProtoError` where TF's ``text_format.Merge`` refuses ``text``
    (``root``: the same text as parsed by ``pbtxt``, to name the field's path)."""
    try:
        text_format.Merge(text, pipeline_message())
    except text_format.ParseError as err:
        raise TfodProtoError(_one_line(str(err), root, source)) from None


def merged_pipeline_text(text: str, override: str, source: str) -> str:
    """The pipeline.config ``text`` with the text proto ``override`` merged in as TF's
    exporters merge ``--config_override`` (``text_format.Merge`` on the parsed message: a
    singular field replaced, a repeated field appended to), written back as TF writes a
    pipeline.config (``text_format.MessageToString``). Raises :class:`TfodProtoError` (one
    line, the override's line and field) for an override TF's parser refuses."""
    from jaxdet.config.pbtxt import PbtxtError, parse_pbtxt

    message = pipeline_message()
    text_format.Merge(text, message)  # the file itself was checked by the caller
    try:
        text_format.Merge(override, message)
    except text_format.ParseError as err:
        try:
            root = parse_pbtxt(override)
        except PbtxtError:
            root = Message("")
        raise TfodProtoError(_one_line(str(err), root, f"{source} --config_override")) from None
    return text_format.MessageToString(message)


def _one_line(error: str, root: Message, source: str) -> str:
    where = _LOCATION.match(error)
    line, col = (int(where.group(1)), int(where.group(2))) if where else (0, 0)
    reason = error[where.end():] if where else error
    place = f"{source}:{line}:{col}" if where else source
    if found := _NO_FIELD.search(reason):
        kind, name = found.groups()
        fields = list(message_descriptor(kind).fields_by_name)
        path = _path_at(root, line, name) or name
        return (f"{place}: {path}: TF's {_short(kind)} has no field '{name}'"
                f"{_suggest(name, fields, 'fields')}")
    if found := _NO_ENUM.search(reason):
        kind, value = found.groups()
        values = list(_pool().FindEnumTypeByName(kind).values_by_name)
        path = _path_at(root, line, None) or "the value"
        return (f"{place}: {path}: {value} is not a value of TF's {_short(kind)}"
                f"{_suggest(value, values, 'values')}")
    if found := re.search(r"Couldn't parse (\w+): (.*)", reason):
        kind, value = found.groups()
        path = _path_at(root, line, None) or "the value"
        return f"{place}: {path}: expected {_TYPES.get(kind, kind)}, found {value}"
    if found := re.search(r"Value out of range: (.*)", reason):
        path = _path_at(root, line, None) or "the value"
        return f"{place}: {path}: {found.group(1)} is out of the range of TF's field"
    path = _path_at(root, line, None)
    return f"{place}: {path + ': ' if path else ''}{reason.rstrip('.')}"


def _short(full_name: str) -> str:
    return full_name.removeprefix(PACKAGE)


def _suggest(word: str, choices: list[str], what: str) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{close[0]}'?"
    shown = ", ".join(sorted(choices)[:12]) + (", ..." if len(choices) > 12 else "")
    return f" (its {what}: {shown})"


def _path_at(msg: Message, line: int, name: str | None) -> str | None:
    """The dotted path of the field written on ``line`` (named ``name`` when given)."""
    best = None
    for field_name, value, field_line in msg.fields:
        path = f"{msg.path}.{field_name}" if msg.path else field_name
        if field_line == line and (name is None or field_name == name):
            best = path
        if isinstance(value, Message):
            inner = _path_at(value, line, name)
            if inner is not None:
                return inner
    return best


__all__ = ["TfodProtoError", "bind_pipeline", "check_pipeline_text", "message_descriptor",
           "pipeline_message"]
