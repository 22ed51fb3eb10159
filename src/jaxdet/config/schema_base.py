"""The base class of every config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Base for all config sections: unknown fields are rejected, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
