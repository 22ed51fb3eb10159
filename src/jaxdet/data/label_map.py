"""TF OD API label maps (``StringIntLabelMap`` text protos), read and written.

A label map lists the classes of a data set::

    item { id: 1 name: 'cat' }
    item { id: 2 name: '/m/01g317' display_name: 'person' }

Ids start at 1 (0 is the background in the TF OD API); jaxdet's 0-based class index of an
item is ``id - 1``. The name shown for an id is its ``display_name`` when present, else its
``name``, else the id itself. Other item fields (``keypoints``, ``frequency``, ...) are ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jaxdet.config.pbtxt import Message, PbtxtError, parse_pbtxt


class LabelMapError(ValueError):
    """A label map that cannot be used; the message names the file (and line)."""


@dataclass(frozen=True)
class LabelMapItem:
    id: int
    name: str | None
    display_name: str | None

    @property
    def shown(self) -> str:
        """display_name, else name, else str(id)."""
        return self.display_name or self.name or str(self.id)


def parse_label_map_items(text: str, source: str = "<label map>") -> list[LabelMapItem]:
    """The items of a label map text, in file order, checked (ids ints >= 1, unique)."""
    try:
        root = parse_pbtxt(text)
    except PbtxtError as e:
        raise LabelMapError(f"{source}: not a valid label map: {e}") from None
    items: list[LabelMapItem] = []
    line_of_id: dict[int, int] = {}
    for message in root.all("item"):
        if not isinstance(message, Message):
            raise LabelMapError(f"{source}: 'item' must be a message {{ id: .. name: .. }}")
        where = f"{source} line {message.line}"
        item_id = message.take("id")
        if item_id is None:
            raise LabelMapError(f"{where}: label map item has no id")
        if isinstance(item_id, bool) or not isinstance(item_id, int):
            raise LabelMapError(f"{where}: id must be an integer, got {item_id!r}")
        if item_id < 1:
            raise LabelMapError(f"{where}: id {item_id} < 1 (id 0 is reserved for the "
                                "background class in the TF OD API; ids start at 1)")
        if item_id in line_of_id:
            raise LabelMapError(f"{where}: duplicate id {item_id} (first on line "
                                f"{line_of_id[item_id]})")
        line_of_id[item_id] = message.line
        name, display = message.take("name"), message.take("display_name")
        items.append(LabelMapItem(item_id, None if name is None else str(name),
                                  None if display is None else str(display)))
    if not items:
        raise LabelMapError(f"{source}: label map has no items")
    return items


def read_label_map_items(path: str | os.PathLike) -> list[LabelMapItem]:
    """The items of the label map file ``path`` (see :func:`parse_label_map_items`)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise LabelMapError(f"label map file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LabelMapError(f"cannot read label map {path}: {e}") from None
    return parse_label_map_items(text, path)


def read_label_map(path: str | os.PathLike) -> dict[int, str]:
    """{id: shown name} of the label map file ``path`` (ids >= 1)."""
    return {item.id: item.shown for item in read_label_map_items(path)}


def text_to_id(items: Sequence[LabelMapItem]) -> dict[str, int]:
    """{class text: id}, accepting both ``name`` and ``display_name`` of every item (records
    hold either: TF's COCO converter writes display names, its pets converter names). A text
    that two items claim is left out (ambiguous)."""
    out: dict[str, int] = {}
    ambiguous: set[str] = set()
    for item in items:
        for text in {item.name, item.display_name} - {None}:
            if text in out and out[text] != item.id:
                ambiguous.add(text)
            out[text] = item.id
    for text in ambiguous:
        del out[text]
    return out


def class_names_from_label_map(label_map: Mapping[int, str] | None, num_classes: int) -> list[str]:
    """Names by 0-based class index (index = id - 1); ids missing from the map -> str(id)."""
    label_map = label_map or {}
    return [label_map.get(i + 1, str(i + 1)) for i in range(num_classes)]


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def format_label_map(names: Sequence[str] | Mapping[int, str]) -> str:
    """Label map text for ``names`` (a sequence: id = index + 1; or {id: name})."""
    pairs = names.items() if isinstance(names, Mapping) else enumerate(names, start=1)
    return "".join(f"item {{\n  id: {int(i)}\n  name: {_quote(str(n))}\n}}\n\n"
                   for i, n in pairs)


def write_label_map(path: str | os.PathLike, names: Sequence[str] | Mapping[int, str]) -> None:
    """Writes ``names`` as a label map file (see :func:`format_label_map`)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(format_label_map(names))


__all__ = ["LabelMapError", "LabelMapItem", "class_names_from_label_map", "format_label_map",
           "parse_label_map_items", "read_label_map", "read_label_map_items", "text_to_id",
           "write_label_map"]
