"""The one base class of every spec: immutable, and unknown fields are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Frozen pydantic model, extra fields forbidden: a typo in YAML is an error, not a no-op."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)
