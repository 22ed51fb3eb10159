"""Load a config from YAML (with ``base:`` inheritance and ``--set a.b=c`` overrides).

Errors are :class:`ConfigError` with one line per problem, each naming the field by its dotted
path; an unknown field lists the nearest valid names, a bad choice lists the allowed values.
"""

from __future__ import annotations

import copy
import difflib
import os
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from jaxdet import files
from jaxdet.config.schema import Config

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


class ConfigError(ValueError):
    """A config that cannot be loaded; the message names each bad field."""


class ConfigNotFoundError(ConfigError, FileNotFoundError):
    """A config file, workdir or model folder named by a path that does not exist (both a
    :class:`ConfigError` and a ``FileNotFoundError``)."""


CONFIG_SUFFIXES = (".yaml", ".yml")


def shipped_config_names() -> list[str]:
    """Names of the configs shipped with jaxdet (``configs/*.yaml`` without the suffix)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def looks_like_path(name: str | os.PathLike) -> bool:
    """Whether ``name`` names a file or folder rather than a shipped config: it holds a path
    separator (a URL, a name in a folder), starts with ``.`` or ``~``, or ends with ``.yaml``
    / ``.yml`` / ``.config``."""
    text = os.fspath(name)
    return (any(sep in text for sep in ("/", os.sep, os.altsep) if sep)
            or text.startswith((".", "~")) or text.endswith((*CONFIG_SUFFIXES, ".config")))


def close_config_names(name: str, n: int = 3) -> list[str]:
    """The shipped config names closest to ``name`` (``difflib``'s similarity, at least 0.6 as
    ``get_close_matches``), best first; equally close ones in name order (``efficientdet_do``:
    ``efficientdet_d0`` first)."""
    scored = [(difflib.SequenceMatcher(None, name, known).ratio(), known)
              for known in shipped_config_names()]
    return [known for score, known in sorted(scored, key=lambda sk: (-sk[0], sk[1]))
            if score >= 0.6][:n]


def unknown_name_message(name: str) -> str:
    """One line for a bare name that is neither a shipped config nor a file or folder: the
    close shipped names, and where the whole list is."""
    close = close_config_names(name.removesuffix(".yaml"))
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return (f"'{name}' is neither a shipped config nor an existing file or folder{hint} "
            "(`jaxdet configs` lists the shipped configs)")


def override_list(overrides: Iterable[str]) -> list[str]:
    """``overrides`` as a list of ``section.field=value`` strings.

    Raises:
      TypeError: a single str (it would be read one character at a time)."""
    if isinstance(overrides, (str, bytes)):
        text = overrides.decode() if isinstance(overrides, bytes) else overrides
        raise TypeError(f"overrides is a list of 'section.field=value' strings, got the str "
                        f"{text!r}: write overrides=[{text!r}]")
    return list(overrides)


def resolve_config_path(name_or_path: str | Path,
                        relative_to: str | Path | None = None) -> str | Path:
    """Return the YAML file for a path or URL (``gs://...``), or for the name of a shipped
    config; a ``base:`` is also looked up beside the file that names it (``relative_to``).

    Raises:
      ConfigNotFoundError: a path (see :func:`looks_like_path`) that does not exist.
      ConfigError: a bare name that is no shipped config (the close ones suggested)."""
    if files.is_url(name_or_path):
        if files.isfile(name_or_path):
            return str(name_or_path)
        raise ConfigNotFoundError(f"config file not found: {name_or_path}")
    candidates: list[str | Path] = [Path(name_or_path)]
    if relative_to is not None:
        candidates.append(files.join(relative_to, str(name_or_path))
                          if files.is_url(relative_to) else Path(relative_to) / name_or_path)
    stem = Path(name_or_path).name.removesuffix(".yaml")
    candidates.append(CONFIG_DIR / f"{stem}.yaml")
    for path in candidates:
        if files.isfile(path):
            return path
    if not looks_like_path(name_or_path):
        raise ConfigError(unknown_name_message(str(name_or_path)))
    where = (f" (looked in the current folder and in {relative_to})"
             if relative_to is not None else "")
    close = ([] if Path(name_or_path).name != str(name_or_path) else
             close_config_names(stem, n=1))
    hint = f"; did you mean the shipped config {close[0]}?" if close else ""
    raise ConfigNotFoundError(f"config file not found: {name_or_path}{where}{hint}")


def _model_of(annotation: Any, tag_value: Any = None) -> type[BaseModel] | None:
    """The schema model a mapping at a field of this annotation validates against: the union
    member whose tag equals ``tag_value`` for a tagged union, or with no tag value the member
    whose tag has a default (``model`` without ``type`` is an SSD); None when none matches."""
    members = [m for m in _union_members(annotation)
               if isinstance(m, type) and issubclass(m, BaseModel)]
    if len(members) == 1:
        return members[0]
    for m in members:
        tag = _tag_of(m)
        if tag and (tag_value in tag[1] if tag_value is not None
                    else not m.model_fields[tag[0]].is_required()):
            return m
    return None


def tag_key(field: Any) -> str | None:
    """``"name"`` / ``"type"`` when a field (a pydantic ``FieldInfo``, or an annotation such as
    a list's item type) holds a section whose tag picks its kind: a tagged union of the schema
    (neck, anchors, head, resizer, data source, learning rate, augment op) or a section that
    declares ``TAG_SELECTS_KIND`` (the optimizer). Else None."""
    if isinstance(field, FieldInfo):
        if isinstance(field.discriminator, str):
            return field.discriminator
        field = field.annotation
    annotation = _strip_optional(field)
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in typing.get_args(annotation)[1:]:
            discriminator = getattr(meta, "discriminator", None)
            if isinstance(discriminator, str):
                return discriminator
    model = _model_of(annotation)
    if model is not None and getattr(model, "TAG_SELECTS_KIND", False):
        tag = _tag_of(model)
        return tag[0] if tag else None
    return None


def _field(model: type[BaseModel] | None, key: Any) -> FieldInfo | None:
    return model.model_fields.get(str(key)) if model is not None else None


def _annotation(field: Any) -> Any:
    return field.annotation if isinstance(field, FieldInfo) else field


def _deep_merge(base: dict, update: Mapping, model: type[BaseModel] | None = Config) -> dict:
    """``update`` merged into ``base`` (neither changed). Nested mappings merge key by key,
    except a tagged section (see :func:`tag_key`) whose tag changes: it is replaced whole, so
    ``data.train: {type: coco, ...}`` over a base's ``{type: shapes, output_dir: ...}`` keeps
    none of the shapes fields. Lists and scalars are replaced."""
    out = dict(base)
    for key, value in update.items():
        old = out.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            field = _field(model, key)
            tag = tag_key(field)
            old_tag = old.get(tag, _default_tag(_annotation(field), tag)) if tag else None
            if tag is not None and tag in value and old_tag is not None and value[tag] != old_tag:
                out[key] = dict(value)
                continue
            sub = _model_of(_annotation(field), value.get(tag, old_tag) if tag else None)
            out[key] = _deep_merge(dict(old), value, sub)
        else:
            out[key] = value
    return out


def load_raw(name_or_path: str | Path, _seen: tuple[str | Path, ...] = ()) -> dict:
    """Read a YAML config into a dict, resolving ``base:`` (a path or a shipped name)."""
    path = resolve_config_path(name_or_path, files.parent(_seen[-1]) if _seen else None)
    if path in _seen:
        raise ConfigError(f"config inheritance loops: {' -> '.join(map(str, _seen + (path,)))}")
    try:
        raw = yaml.safe_load(files.read_text(path)) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config must be a mapping at the top level")
    base = raw.pop("base", None)
    if base is not None:
        own = raw
        raw = _deep_merge(load_raw(base, _seen + (path,)), own)
        # the base's name and description describe the base (its classes, its data), not
        # this file: a derived config that sets neither says what it is
        if "name" not in own:
            raw["name"] = files.basename(path).removesuffix(".yaml")
        if "description" not in own:
            fields = _leaf_paths(own)
            raw["description"] = (f"based on {Path(str(base)).stem}, setting "
                                  f"{', '.join(fields[:4])}{', ...' if len(fields) > 4 else ''}"
                                  if fields else f"as {Path(str(base)).stem}")
    return raw


def _leaf_paths(tree: Mapping, prefix: str = "") -> list[str]:
    """The dotted paths of ``tree``'s fields, a section counted once when it is replaced
    whole (a mapping with a ``type``/``name`` tag) and nested otherwise."""
    out = []
    for key, value in tree.items():
        if isinstance(value, Mapping) and value and not ({"type", "name"} & set(value)):
            out += _leaf_paths(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}")
    return out


def apply_overrides(raw: dict, overrides: Iterable[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML; list items by index: ``a.0.b``)."""
    overrides = override_list(overrides)
    raw = copy.deepcopy(dict(raw))  # nested dicts and lists too: the caller's raw stays intact
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like section.field=value")
        dotted, value_text = item.split("=", 1)
        keys = dotted.strip().split(".")
        value = yaml.safe_load(value_text) if value_text.strip() else ""
        node: Any = raw
        for i, key in enumerate(keys[:-1]):
            if isinstance(node, list):
                node = _list_item(node, key, keys[: i + 1])
                continue
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            elif isinstance(child, (list, tuple)):
                child = node[key] = list(child)
            node = child
        last = keys[-1]
        if isinstance(node, list):
            node[_list_index(node, last, keys)] = value
        elif _replaces_section(raw, keys, node, value):
            node.clear()  # a new kind of section: the old kind's fields do not carry over
            node[last] = value
        else:
            node[last] = value
    return raw


def _replaces_section(raw: dict, keys: list[str], node: dict, value: Any) -> bool:
    """True when ``--set a.b.<tag>=value`` changes the kind of the tagged section ``a.b``
    (``raw`` is the whole config, ``node`` the mapping at ``a.b``)."""
    if len(keys) < 2 or keys[-1] not in node or node[keys[-1]] == value:
        return False
    model: type[BaseModel] | None = Config
    annotation: Any = None
    current: Any = raw
    for key in keys[:-1]:
        if isinstance(current, list):
            args = typing.get_args(_strip_optional(_annotation(annotation)))
            args = [a for a in args if a is not Ellipsis]
            annotation = args[0] if args else None
            current = current[int(key)]
        else:
            annotation = _field(model, key)
            current = current.get(key) if isinstance(current, Mapping) else None
        if annotation is None:
            return False
        tag = tag_key(annotation)
        model = _model_of(_annotation(annotation),
                          current.get(tag) if tag and isinstance(current, Mapping) else None)
    return tag_key(annotation) == keys[-1]


def _list_index(node: list, key: str, path: list[str]) -> int:
    if not key.lstrip("-").isdigit() or not -len(node) <= int(key) < len(node):
        raise ConfigError(
            f"override path '{'.'.join(path)}': '{key}' is not an index of a {len(node)}-item list"
        )
    return int(key)


def _list_item(node: list, key: str, path: list[str]) -> Any:
    index = _list_index(node, key, path)
    if isinstance(node[index], dict):
        node[index] = dict(node[index])
    return node[index]


def validate(raw: Mapping, source: str = "config") -> Config:
    """Validate a raw dict into a :class:`Config`, turning pydantic errors into ConfigError."""
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        lines = [describe_error(e) for e in err.errors()]
        raise ConfigError(f"{source}: {len(lines)} problem(s)\n  " + "\n  ".join(lines)) from None


def load_config(name_or_path: str | Path, overrides: Iterable[str] = ()) -> Config:
    """Load, merge ``base:``, apply overrides and validate. Raises ConfigError."""
    raw = apply_overrides(load_raw(name_or_path), overrides)
    return validate(raw, source=str(name_or_path))


def dump_config(config: Config) -> str:
    """The config as YAML text (every field, defaults included)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


# --------------------------------------------------------------------------- error messages


def _strip_optional(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_optional(args[0])
    return annotation


def _union_members(annotation: Any) -> list[Any]:
    annotation = _strip_optional(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _default_tag(annotation: Any, tag: str) -> Any:
    """The tag a section of this tagged union has when it names none: the default of the one
    member whose tag field has one (``model.type``: ``ssd``), else None."""
    for member in _union_members(annotation):
        field = member.model_fields.get(tag) if isinstance(member, type) and issubclass(
            member, BaseModel) else None
        if field is not None and not field.is_required():
            return field.default
    return None


def _tag_of(model: type[BaseModel]) -> tuple[str, Any] | None:
    for key in ("name", "type"):
        field = model.model_fields.get(key)
        if field is not None and typing.get_origin(field.annotation) is typing.Literal:
            return key, typing.get_args(field.annotation)
    return None


def _walk(loc: tuple) -> tuple[str, type[BaseModel] | None]:
    """Follow a pydantic error location through the schema.

    Returns the dotted user-facing path (without union tags) and the model class that holds the
    last element, or None if the path leaves the schema.
    """
    current: Any = Config
    parts: list[str] = []
    holder: type[BaseModel] | None = Config
    items = list(loc)
    while items:
        key = items.pop(0)
        members = _union_members(current)
        all_models = all(isinstance(m, type) and issubclass(m, BaseModel) for m in members)
        if len(members) > 1 and all_models:
            chosen = None
            for m in members:
                tag = _tag_of(m)
                if tag and key in tag[1]:
                    chosen = m
            if chosen is not None:  # the location names the union tag: skip it
                current = chosen
                continue
        current = members[0] if len(members) == 1 else current
        if typing.get_origin(current) in (tuple, list) and isinstance(key, int):
            parts.append(str(key))
            args = [a for a in typing.get_args(current) if a is not Ellipsis]
            current = args[0] if args else Any
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            holder = current
            parts.append(str(key))
            field = current.model_fields.get(str(key))
            current = field.annotation if field is not None else None
            continue
        parts.append(str(key))
        holder = None
    return ".".join(parts), holder


def describe_error(error: Mapping[str, Any]) -> str:
    """One readable line for one pydantic error."""
    path, holder = _walk(tuple(error["loc"]))
    kind = error["type"]
    if kind == "extra_forbidden":
        name = path.rsplit(".", 1)[-1]
        valid = sorted(holder.model_fields) if holder is not None else []
        close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return f"{path}: unknown field '{name}'.{hint} Valid fields here: {', '.join(valid)}"
    if kind == "missing":
        return f"{path}: required field is missing"
    if kind == "union_tag_invalid":
        ctx = error.get("ctx", {})
        return (
            f"{path}: '{ctx.get('tag')}' is not a valid {ctx.get('discriminator', 'name')}; "
            f"allowed: {ctx.get('expected_tags')}"
        )
    if kind == "union_tag_not_found":
        return f"{path}: needs a {error.get('ctx', {}).get('discriminator', 'name')} field"
    if kind == "value_error":  # a cross-field check: its message says it all
        return f"{path or 'config'}: {error['msg'].removeprefix('Value error, ')}"
    return f"{path}: {error['msg']} (got {error.get('input')!r})"
