"""`PersonaLab`: the one object a front end (host app, CLI, HTTP routes, web app) holds (LAYOUT "one door").

Bound once to a caller (owner, database); each area of the engine is an attribute grouping its operations
(`api.characters.create(...)`, `api.memories.search(...)`). Every operation checks the owner and runs as one
transaction.
"""

from __future__ import annotations

from personalab.graph.api.admin import AdminApi
from personalab.graph.api.caller import Caller
from personalab.graph.api.core_memory import CoreMemoryApi
from personalab.graph.api.knowledge import KnowledgeApi
from personalab.graph.api.plot import PlotApi
from personalab.graph.api.suggestions import SuggestionsApi
from personalab.graph.api.trigger_config import TriggerConfigApi
from personalab.graph.api.worldbook import WorldbookApi


class PersonaLab:
    """The engine's API for one caller."""

    def __init__(self, *, owner: str | None = None, database_url: str | None = None) -> None:
        self.caller = Caller(owner=owner, database_url=database_url)
        self.trigger_config = TriggerConfigApi(self.caller)
        self.core_memory = CoreMemoryApi(self.caller)
        self.plot = PlotApi(self.caller)
        self.suggestions = SuggestionsApi(self.caller)
        self.knowledge = KnowledgeApi(self.caller)
        self.worldbook = WorldbookApi(self.caller)
        self.admin = AdminApi(self.caller)

    @property
    def owner(self) -> str | None:
        return self.caller.owner

    @property
    def database_url(self) -> str | None:
        return self.caller.database_url
