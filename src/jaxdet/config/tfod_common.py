"""Shared pieces of the pipeline.config mappers: :class:`Mapper` and the helpers that more
than one model family reads.

:class:`Mapper` carries the state of mapping one file (its name, the warnings for the user) and
reads fields the way every mapper must: ``only`` refuses an unsupported value, ``sub`` and
``choice`` open sub-messages with TF's defaults, ``error`` names the file, line and field. The
helpers map TF messages that several families share: a ``Hyperparams`` message's activation,
BatchNorm and L2 weight, the ``image_resizer`` and ``multiscale_anchor_generator``. Used by the
dispatcher (``config/tfod.py``), the family mappers (``config/tfod_ssd.py``,
``config/tfod_center_net.py``, ``config/tfod_deepmac.py``, ``config/tfod_faster_rcnn.py``) and
``config/tfod_train.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jaxdet.config.loader import ConfigError
from jaxdet.config.pbtxt import EnumValue, Message, PbtxtError

ACTIVATIONS = {"RELU": "relu", "RELU_6": "relu6", "SWISH": "swish", "NONE": "none"}


class TfodConfigError(ConfigError):
    """A pipeline.config jaxdet cannot map; the message names the file, line and field."""


class Mapper:
    """Shared state while mapping one file: where it came from and what to tell the user."""

    def __init__(self, source: str):
        self.source = source
        self.warnings: list[str] = []

    def error(self, msg: Message, name: str | None, text: str) -> TfodConfigError:
        line = msg.line_of(name) if name else msg.line
        where = f"{msg.path}.{name}" if name else (msg.path or "the file")
        return TfodConfigError(f"{self.source}:{line}: {where}: {text}")

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def only(self, msg: Message, name: str, allowed: Iterable[Any], default: Any) -> Any:
        """Reads ``name`` and refuses any value outside ``allowed``."""
        value = msg.take(name, default)
        allowed = list(allowed)
        if value not in allowed:
            show = str if isinstance(value, EnumValue) else _show
            unset = "" if msg.has(name) else " (unset: TF's default)"
            raise self.error(msg, name, f"{show(value)}{unset} is not supported; jaxdet "
                             f"supports {' or '.join(map(show, allowed))}"
                             f"{f'; set {name}: {_written(allowed[0])}' if unset else ''}")
        return value

    def sub(self, msg: Message, name: str) -> Message:
        """The sub-message ``name``, or an empty one (TF defaults) when absent."""
        value = msg.take(name)
        if value is None:
            return msg.child(name)
        if not isinstance(value, Message):
            raise self.error(msg, name, "expected a message { ... }, found a value")
        return value

    def choice(self, msg: Message, name: str, supported: Iterable[str],
               default: str | None = None) -> tuple[str, Message]:
        """A oneof wrapper such as ``box_coder { faster_rcnn_box_coder {...} }``."""
        if not msg.has(name):
            if default is None:
                raise self.error(msg, None, f"{name} is required")
            return default, msg.child(name).child(default)
        wrapper = self.sub(msg, name)
        try:
            kind, value = wrapper.oneof()
        except PbtxtError as err:
            raise TfodConfigError(f"{self.source}: {err}") from None
        supported = list(supported)
        if kind not in supported:
            raise self.error(wrapper, kind, f"not supported; jaxdet supports "
                             f"{', '.join(supported)}")
        if not isinstance(value, Message):
            raise self.error(wrapper, kind, "expected a message { ... }")
        return kind, value


def _written(value: Any) -> str:
    """A value as a pipeline.config writes it (true, RELU_6, 0.5, "text")."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, (EnumValue, int, float)) else f'"{value}"'


def _show(value: Any) -> str:
    """A value as the user wrote it: enums bare, strings quoted."""
    return str(value) if isinstance(value, (EnumValue, bool)) else repr(value)


def hyper_activation(m: Mapper, hyper: Message) -> str:
    """A Hyperparams message's ``activation`` -> jaxdet's activation name."""
    return ACTIVATIONS[m.only(hyper, "activation", ACTIVATIONS, "RELU")]


def hyper_batch_norm(m: Mapper, hyper: Message, freeze: bool) -> dict[str, Any] | None:
    """conv_hyperparams.batch_norm -> jaxdet batch_norm, or None when there is none."""
    if not hyper.has("batch_norm"):
        return None
    bn = m.sub(hyper, "batch_norm")
    if bn.has("scale"):
        m.only(bn, "scale", [True], False)
    else:  # TF's default false builds no gamma; jaxdet's batch norm always has one
        bn.take("scale", False)
        m.warn(f"{bn.path}.scale: unset, which TF reads as false (no gamma, the scale); "
               "jaxdet's batch norm keeps a gamma, initialized to 1 (set scale: true to match)")
    m.only(bn, "center", [True], True)
    train = bn.take("train", True)
    return {"decay": float(bn.take("decay", 0.999)), "epsilon": float(bn.take("epsilon", 1e-3)),
            "frozen": bool(freeze or not train)}


def hyper_l2_weight(m: Mapper, hyper: Message) -> float:
    """A Hyperparams message's ``regularizer`` -> its L2 weight (0.0 when there is none)."""
    if not hyper.has("regularizer"):
        return 0.0
    kind, reg = m.choice(hyper, "regularizer", ["l2_regularizer", "l1_regularizer"])
    if kind == "l1_regularizer":
        raise m.error(hyper, "regularizer", "l1_regularizer is not supported; use l2_regularizer")
    return float(reg.take("weight", 1.0))


def multiscale_anchors(ag: Message) -> dict:
    """multiscale_anchor_generator {...} -> jaxdet's multiscale anchors in TF's layout (TF's
    defaults; ``normalize_coordinates`` only changes TF's internal units)."""
    return {"name": "multiscale", "min_level": int(ag.take("min_level", 3)),
            "max_level": int(ag.take("max_level", 7)),
            "anchor_scale": float(ag.take("anchor_scale", 4.0)),
            "scales_per_octave": int(ag.take("scales_per_octave", 2)),
            "aspect_ratios": [float(a) for a in ag.all("aspect_ratios")] or [1.0, 2.0, 0.5],
            "tf_layout": True}


def image_resizer(m: Mapper, arch: Message) -> dict:
    """An architecture's ``image_resizer {...}`` (ssd, center_net, faster_rcnn) -> jaxdet's
    ``data.resizer``."""
    kind, r = m.choice(arch, "image_resizer", ["fixed_shape_resizer", "keep_aspect_ratio_resizer"])
    m.only(r, "resize_method", ["BILINEAR"], "BILINEAR")
    m.only(r, "convert_to_grayscale", [False], False)
    if kind == "fixed_shape_resizer":
        return {"name": "fixed_shape", "height": int(r.take("height", 300)),
                "width": int(r.take("width", 300)), "method": "tf_bilinear"}
    if not r.take("pad_to_max_dimension", False):
        m.warn(f"{r.path}.pad_to_max_dimension: false -> true (jaxdet pads every image to "
               "max_dimension x max_dimension for one static shape; the content is the same)")
    if r.has("per_channel_pad_value"):
        raise m.error(r, "per_channel_pad_value", "not supported: jaxdet pads with zeros "
                      "after normalization")
    return {"name": "keep_aspect_ratio", "min_dimension": int(r.take("min_dimension", 600)),
            "max_dimension": int(r.take("max_dimension", 1024)), "pad_to_max_dimension": True,
            "method": "tf_bilinear"}
