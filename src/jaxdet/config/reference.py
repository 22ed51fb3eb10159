"""Markdown generated from the schema and the shipped configs, embedded in the manual.

``python -m jaxdet.config.reference --write docs/reference/config.md docs/models/index.md``
refreshes the config reference and the shipped-config table between their markers in the
pages that hold them; a test fails when a page is stale.
"""

from __future__ import annotations

import inspect
import types
import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from jaxdet.config.schema import Config

BEGIN = "<!-- config-reference:begin -->"
END = "<!-- config-reference:end -->"
TABLE_BEGIN = "<!-- shipped-configs:begin -->"
TABLE_END = "<!-- shipped-configs:end -->"


def _type_text(annotation: typing.Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _type_text(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(a) for a in typing.get_args(annotation))
    if origin in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"list of {_type_text(args[0])}" if args else "list"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"section `{annotation.__name__}`"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(field) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "**required**"
    value = field.default
    if isinstance(value, BaseModel):
        return "(section defaults)"
    return f"`{value!r}`" if value is not None else "`null`"


def _sections(model: type[BaseModel], path: str, out: list, seen: set, owner: str = "") -> None:
    """Appends the section of ``model`` at ``path`` and, depth first, its sub-sections.
    ``owner`` ("`model.type: center_net`") names the nearest tagged ancestor; a path that two
    sections share (``model.loss`` of each model type) gets it in its title."""
    key = (model, path)
    if key in seen:
        return
    shared_path = any(p == path and m is not model for m, p in seen)
    seen.add(key)
    title = f"`{path}`" if path else "top level"
    kind = ""
    for tag in ("name", "type"):
        f = model.model_fields.get(tag)
        literal = f is not None and typing.get_origin(f.annotation) is typing.Literal
        if literal and path and len(typing.get_args(f.annotation)) == 1:
            value = typing.get_args(f.annotation)[0]
            kind = f" ({tag}: `{value}`)"
            if tag == "type":
                owner = f"`{path}.type: {value}`"
    if not kind and shared_path and owner:
        kind = f" (in {owner})"
    out.append(f"\n## {title}{kind}\n")
    description = section_description(model)
    if description:
        out.append(f"{description}\n")
    out.append("| field | type / allowed values | default |\n| --- | --- | --- |")
    nested = []
    for name, field in model.model_fields.items():
        out.append(f"| `{name}` | {_type_text(field.annotation)} | {_default_text(field)} |")
        for sub in _models_in(field.annotation):
            nested.append((sub, f"{path}.{name}" if path else name))
    for sub, sub_path in nested:
        _sections(sub, sub_path, out, seen, owner)


def section_description(model: type[BaseModel]) -> str:
    """A section's whole docstring as Markdown: paragraphs re-flowed, RST ````x```` as `x`."""
    doc = inspect.cleandoc(model.__dict__.get("__doc__") or "")
    if not doc or doc.startswith("Base for"):
        return ""
    paragraphs = [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
    return "\n\n".join(p.replace("``", "`") for p in paragraphs)


def _models_in(annotation: typing.Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for arg in typing.get_args(annotation):
        found.extend(_models_in(arg))
    return found


def config_reference() -> str:
    """The whole reference as Markdown (one table per section, tagged unions per kind)."""
    out: list[str] = []
    _sections(Config, "", out, set())
    return "\n".join(out).strip() + "\n"


def shipped_configs_table() -> str:
    """One row per shipped config: what it builds, input size, batch, steps."""
    from jaxdet.config.input_size import input_size
    from jaxdet.config.loader import load_config, shipped_config_names

    rows = [
        "| config | builds | input | backbone | neck | head | batch x steps |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in shipped_config_names():
        c = load_config(name)
        m = c.model
        if m.type == "unet3d":
            rows.append(f"| `{name}` | {c.description} | {'x'.join(map(str, m.patch_size))} "
                        f"patches | 3D U-Net {'-'.join(map(str, m.filters))} | - | "
                        f"{m.num_classes} classes per voxel | "
                        f"{c.train.batch_size} x {c.train.num_steps} |")
            continue
        h, w = input_size(c.data)
        backbone = m.backbone.name + (
            f" x{m.backbone.depth_multiplier:g}" if m.backbone.depth_multiplier != 1 else ""
        )
        n = getattr(m, "neck", None)  # faster_rcnn (C4) has none
        levels = (f" P{n.min_level}-P{n.max_level}" if n is not None
                  and n.name in ("fpn", "bifpn") else "")
        width = (f" d{n.depth}" if n is not None and n.name == "fpn" else
                 f" d{n.num_filters} x{n.num_iterations}" if n is not None
                 and n.name == "bifpn" else "")
        neck = ("-" if n is None else n.name) + levels + width + (
            " (depthwise)" if getattr(n, "use_depthwise", False) else "")
        if m.type == "faster_rcnn":
            classifier = ("conv5 box classifier" if n is None
                          else f"FC {m.box_classifier_fc_depth} x2 box classifier")
            head = (f"rpn d{m.first_stage_box_predictor_depth} + {classifier} "
                    f"({m.first_stage_max_proposals} proposals)")
        elif m.type == "center_net":
            head = f"center_net P{m.feature_level} d{m.head_depth}"
        else:
            head = m.head.name + (
                f" d{m.head.depth} x{m.head.num_layers_before_predictor}"
                if m.head.name == "weight_shared" else f" k{m.head.kernel_size}"
            )
        rows.append(
            f"| `{name}` | {c.description} | {h}x{w} | {backbone} | {neck} | {head} | "
            f"{c.train.batch_size} x {c.train.num_steps} |"
        )
    return "\n".join(rows) + "\n"


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with what lies between the markers ``begin`` and ``end`` replaced by ``body``
    (the markers kept): how every generated part of the manual is refreshed in its page."""
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[:start] + "\n" + body + text[stop:]


def render_generated(text: str) -> str:
    """``text`` with each generated part whose markers it holds refreshed."""
    if BEGIN in text:
        text = replace_between(text, BEGIN, END, config_reference())
    if TABLE_BEGIN in text:
        text = replace_between(text, TABLE_BEGIN, TABLE_END, shipped_configs_table())
    return text


if __name__ == "__main__":
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description="print or refresh the generated doc parts")
    parser.add_argument("--write", metavar="PAGE", nargs="+",
                        help="update these Markdown pages in place")
    args = parser.parse_args()
    if args.write:
        for page in args.write:
            path = Path(page)
            path.write_text(render_generated(path.read_text()))
    else:
        print(config_reference())
