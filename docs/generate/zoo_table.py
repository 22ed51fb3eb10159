"""The TF2 model zoo's pipeline.configs in jaxdet, one row each, as a Markdown table for the
TF OD API guide: what each converts to, its parameter count, whether its TF checkpoints
import, and how many of its fields jaxdet treats differently.

    python docs/generate/zoo_table.py --configs DIR_OF_PIPELINE_CONFIGS --write docs/guides/tfod.md

refreshes the table between the page's markers (every row is computed: the config converted
and validated, the model built abstractly, the family asked for its TF name map).
"""

from __future__ import annotations

from pathlib import Path

from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import apply_overrides, validate
from jaxdet.config.reference import replace_between
from jaxdet.config.tfod import convert_pipeline_config
from jaxdet.data.build import input_size
from jaxdet.interop.tfod_names import UnmappedModelError
from jaxdet.models.abstract import abstract_build
from jaxdet.models.inspect import count_parameters

BEGIN = "<!-- zoo-table:begin -->"
END = "<!-- zoo-table:end -->"
# the zoo files' data paths are placeholders; the table is about the models
PLACEHOLDERS = ["data.train.input_path=unused", "data.eval.input_path=unused"]
FAMILY_NAMES = {"ssd": "SSD family", "center_net": "CenterNet", "faster_rcnn": "Faster R-CNN"}


def zoo_row(path: Path) -> dict:
    """One pipeline.config's row: ``config`` (file stem), ``family``, ``backbone``,
    ``input`` (H x W), ``parameters`` (trainable, of jaxdet's model), ``checkpoints``
    (``yes`` when the family maps TF's variable names onto the model, else why not), and
    ``differences`` (fields jaxdet treats differently, each a warning of the conversion)."""
    conversion = convert_pipeline_config(path)
    config = validate(apply_overrides(conversion.raw, PLACEHOLDERS), source=str(path))
    family = tasks.resolve(config)
    model = abstract_build(lambda: family.build_task(seed=0).model)
    try:
        family.tf_name_map(model)
        checkpoints = "yes"
    except UnmappedModelError:
        checkpoints = "not yet"
    m = config.model
    family = FAMILY_NAMES.get(m.type, m.type)
    if m.type == "center_net" and getattr(m, "mask_head", None) is not None:
        family = "CenterNet + DeepMAC masks"
    elif m.type == "center_net" and getattr(m, "keypoint_tasks", None):
        family = "CenterNet + keypoints"
    elif m.type == "faster_rcnn" and getattr(m, "predict_instance_masks", False):
        family = "Mask R-CNN"
    height, width = input_size(config.data)
    return {"config": path.stem, "family": family, "backbone": m.backbone.name,
            "input": f"{height} x {width}", "parameters": count_parameters(model, nnx.Param),
            "checkpoints": checkpoints, "differences": len(conversion.warnings)}


def zoo_table(configs: Path) -> str:
    """The Markdown table of every ``*.config`` in ``configs``, sorted by name."""
    lines = ["| TF2 zoo config | jaxdet model | backbone | input | parameters | TF checkpoints "
             "import | fields treated differently |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for path in sorted(Path(configs).glob("*.config")):
        r = zoo_row(path)
        lines.append(f"| `{r['config']}` | {r['family']} | `{r['backbone']}` | {r['input']} "
                     f"| {r['parameters']:,} | {r['checkpoints']} | {r['differences']} |")
    return "\n".join(lines) + "\n"


def render(text: str, configs: Path) -> str:
    """``text`` with the table between the markers refreshed."""
    return replace_between(text, BEGIN, END, zoo_table(configs))


__all__ = ["zoo_row", "zoo_table"]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="print or refresh the TF2 zoo table")
    parser.add_argument("--configs", required=True, help="a folder of pipeline.config files")
    parser.add_argument("--write", metavar="PAGE", help="update this Markdown page in place")
    args = parser.parse_args()
    if args.write:
        page = Path(args.write)
        page.write_text(render(page.read_text(), Path(args.configs)))
    else:
        print(zoo_table(Path(args.configs)), end="")
