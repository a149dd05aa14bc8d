"""Request / response models of seed 004's trigger configuration (issue 23; graph/api/trigger_config.py)."""

from __future__ import annotations

from typing import Any

# the body of a change is the rules' own model: every field optional, null unsets (nodes.rules.trigger_config)
from personalab.nodes.rules.trigger_config import TriggerConfig as TriggerConfigUpdate  # noqa: F401
from pydantic import BaseModel


class TriggerConfigPublic(BaseModel):
    """One scope's configuration: what is set there (`set`), what is in effect there (`effective`, every field)
    and where each effective field comes from (`sources`: "instance 3", "character 2", "global", "default";
    the per-type maxima per type, `max_per_type.goal`)."""

    scope: str
    set: dict[str, Any]
    effective: dict[str, Any]
    sources: dict[str, str]
