"""TF OD API label maps (``StringIntLabelMap`` text protos), read and written.

A label map lists the classes of a data set::

    item { id: 1 name: 'cat' }
    item { id: 2 name: '/m/01g317' display_name: 'person' }

Ids start at 1 (0 is the background in the TF OD API); jaxdet's 0-based class index of an
item is ``id - 1``. The name shown for an id is its ``display_name`` when present, else its
``name``, else the id itself.

An item may define its class's keypoints (the TF OD API's ``KeypointMap``; CenterNet keypoint
tasks take them through ``keypoint_label_map_path`` + ``keypoint_class_name``)::

    item { name: "/m/01g317" id: 1 display_name: "person"
      keypoints { id: 0 label: "nose" } keypoints { id: 1 label: "left_eye" } ... }

They are read into :attr:`LabelMapItem.keypoints` as ``(id, label)`` pairs;
:func:`keypoint_spec_from_label_map` turns one class's into a ``KeypointSpec``. Other item
fields (``frequency``, ``ancestor_ids``, ...) are ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jaxdet import files
from jaxdet.config.keypoint_specs import KeypointSpec
from jaxdet.config.pbtxt import Message, PbtxtError, parse_pbtxt


class LabelMapError(ValueError):
    """A label map that cannot be used; the message names the file (and line)."""


@dataclass(frozen=True)
class LabelMapItem:
    """One ``item`` of a label map; ``keypoints``: its ``keypoints { id label }`` entries as
    ``(id, label)`` pairs in file order (empty for a class without keypoints)."""

    id: int
    name: str | None
    display_name: str | None
    keypoints: tuple[tuple[int, str], ...] = ()

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
                                  None if display is None else str(display),
                                  _item_keypoints(message, where)))
    if not items:
        raise LabelMapError(f"{source}: label map has no items")
    return items


def _item_keypoints(item: Message, where: str) -> tuple[tuple[int, str], ...]:
    """The ``keypoints { id: .. label: .. }`` entries of one item, as (id, label) pairs in
    file order; ids are ints >= 0 and, like labels, unique within the item (TF's rule)."""
    out: list[tuple[int, str]] = []
    for entry in item.all("keypoints"):
        if not isinstance(entry, Message):
            raise LabelMapError(f"{where}: 'keypoints' must be a message {{ id: .. label: .. }}")
        at = f"{where} (keypoints on line {entry.line})"
        kp_id, label = entry.take("id"), entry.take("label")
        if isinstance(kp_id, bool) or not isinstance(kp_id, int) or kp_id < 0:
            raise LabelMapError(f"{at}: keypoint id must be an integer >= 0, got {kp_id!r}")
        if not isinstance(label, str) or not label:
            raise LabelMapError(f"{at}: keypoint {kp_id} has no label")
        if kp_id in (i for i, _ in out):
            raise LabelMapError(f"{at}: duplicate keypoint id {kp_id}")
        if label in (name for _, name in out):
            raise LabelMapError(f"{at}: duplicate keypoint label {label!r}")
        out.append((kp_id, label))
    return tuple(out)


def read_label_map_items(path: str | os.PathLike) -> list[LabelMapItem]:
    """The items of the label map file ``path`` (see :func:`parse_label_map_items`)."""
    path = os.fspath(path)
    try:
        text = files.read_text(path)
    except FileNotFoundError:
        raise LabelMapError(f"label map file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LabelMapError(f"cannot read label map {path}: {e}") from None
    return parse_label_map_items(text, path)


def read_label_map(path: str | os.PathLike) -> dict[int, str]:
    """{id: shown name} of the label map file ``path`` (ids >= 1)."""
    return {item.id: item.shown for item in read_label_map_items(path)}


def keypoint_spec_from_label_map(path: str | os.PathLike, class_name: str) -> KeypointSpec:
    """The keypoints the label map ``path`` defines for the class ``class_name`` (what a TF
    ``keypoint_estimation_task`` takes from ``keypoint_label_map_path`` and
    ``keypoint_class_name``).

    The class is looked up by ``name`` (what TF matches, e.g. ``"/m/01g317"``), else by
    ``display_name`` (``"person"``). The spec's ``class_name`` is the item's shown name
    (display_name, else name: what jaxdet's sources call the class), its ``names`` the
    keypoint labels ordered by keypoint id, its skeleton empty (label maps have none).

    Raises:
      LabelMapError (a ValueError) naming the path and the class looked for: the file is
      missing or not a label map, no item has that name, or the item has no keypoints.
    """
    path = os.fspath(path)
    looking = f"looking for the keypoints of class {class_name!r}"
    try:
        items = read_label_map_items(path)
    except LabelMapError as e:
        raise LabelMapError(f"{e} ({looking})") from None
    found = ([i for i in items if i.name == class_name]
             or [i for i in items if i.display_name == class_name])
    if not found:
        with_keypoints = [i.name or i.shown for i in items if i.keypoints]
        raise LabelMapError(
            f"{path}: no item named {class_name!r} (by name or display_name) ({looking}); "
            f"items with keypoints: {with_keypoints or 'none'}")
    item = found[0]
    if not item.keypoints:
        raise LabelMapError(f"{path}: item {item.id} ({item.shown!r}) defines no keypoints "
                            f"({looking}); add keypoints {{ id: .. label: .. }} entries")
    names = tuple(label for _, label in sorted(item.keypoints))
    return KeypointSpec(class_name=item.shown, names=names)


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


def format_label_map(names: Sequence[str] | Mapping[int, str],
                     keypoints: Mapping[int, Sequence[tuple[int, str]]] | None = None) -> str:
    """Label map text for ``names`` (a sequence: id = index + 1; or {id: name}).

    ``keypoints``: {item id: [(keypoint id, label), ...]}, written as the item's
    ``keypoints { id: .. label: .. }`` entries (read back by :func:`parse_label_map_items`)."""
    pairs = names.items() if isinstance(names, Mapping) else enumerate(names, start=1)
    keypoints = keypoints or {}
    out = []
    for i, n in pairs:
        entries = "".join(f"  keypoints {{\n    id: {int(k)}\n    label: {_quote(str(label))}\n"
                          "  }\n" for k, label in keypoints.get(int(i), ()))
        out.append(f"item {{\n  id: {int(i)}\n  name: {_quote(str(n))}\n{entries}}}\n\n")
    return "".join(out)


def write_label_map(path: str | os.PathLike, names: Sequence[str] | Mapping[int, str],
                    keypoints: Mapping[int, Sequence[tuple[int, str]]] | None = None) -> None:
    """Writes ``names`` (and ``keypoints``) as a label map file (see
    :func:`format_label_map`)."""
    files.write_text(path, format_label_map(names, keypoints))


__all__ = ["LabelMapError", "LabelMapItem", "class_names_from_label_map", "format_label_map",
           "keypoint_spec_from_label_map", "parse_label_map_items", "read_label_map",
           "read_label_map_items", "text_to_id", "write_label_map"]
