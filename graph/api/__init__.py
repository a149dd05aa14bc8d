"""The Python API a host app and every front end uses (LAYOUT "one door"): `PersonaLab(owner=…, database_url=…)`,
one attribute per area — `characters`, `backgrounds`, `instances`, `dialogue`, `cards` (seed 002 功能需求) — and
`Caller`, what the object is bound to. Turns run through `personalab.graph.runner.run_turn`.

The previous release's functions of `personalab.graph.api.library` (`create_character(…)`, `list_instances(…)`, …)
are still re-exported here for one release; they are loaded on first use, so importing the package stays light.
"""

from __future__ import annotations

from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.facade import PersonaLab

_LIBRARY_NAMES = (
    "DEFAULT_OUTLINE",
    "MAX_OUTLINE",
    "MIN_OUTLINE",
    "BackgroundEdit",
    "BackgroundInput",
    "BackgroundOut",
    "Backgrounds",
    "Character",
    "CharacterEdit",
    "CharacterInput",
    "Characters",
    "Deleted",
    "ImportResult",
    "InUse",
    "Instance",
    "InstanceBusy",
    "InstanceInput",
    "Instances",
    "PlotProgress",
    "character_avatar",
    "check_avatar",
    "check_instance",
    "create_background",
    "create_character",
    "create_instance",
    "delete_background",
    "delete_character",
    "delete_instance",
    "edit_background",
    "edit_character",
    "export_instance",
    "export_instance_data",
    "get_background",
    "get_character",
    "get_instance",
    "import_instance",
    "import_instance_data",
    "initial_core_memory_of",
    "instance_ids_of",
    "instance_owner",
    "list_backgrounds",
    "list_characters",
    "list_instances",
    "owns",
    "rename_instance",
    "visible_to",
)


def __getattr__(name: str) -> Any:
    """The library's names, imported when first asked for (PEP 562)."""
    if name in _LIBRARY_NAMES:
        from personalab.graph.api import library

        return getattr(library, name)
    raise AttributeError(f"module 'personalab.graph.api' has no attribute {name!r}")


__all__ = ["Caller", "PersonaLab", *_LIBRARY_NAMES]
