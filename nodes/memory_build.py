"""Graph node memory_build (seed 000 + seed 002 Recall Memory): the instance's path → the messages its character sees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from personalab.nodes.rules.memory_builder import (
    build_memory,
)


def memory_build(state: Mapping[str, Any], runtime: Any = None) -> dict[str, Any]:
    """Graph node: the instance's history → the messages its character sees (recall memory, seed 002)."""
    character = state["character"]
    return {
        "messages": build_memory(state.get("history", []), role_id=character.get("role_id"), display_name=character["name"])
    }
