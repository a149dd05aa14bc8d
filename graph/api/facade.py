"""`PersonaLab`: the one object a front end (host app, CLI, HTTP routes, web app) holds (LAYOUT "one door").

Bound once to a caller (owner, database); each area of the engine is an attribute grouping its operations
(`api.characters.create(...)`, `api.memories.search(...)`). Every operation checks the owner and runs as one
transaction.
"""

from __future__ import annotations

from personalab.graph.api.caller import Caller
from personalab.graph.api.memory import Memories
from personalab.graph.api.replies import Replies
from personalab.graph.api.statistics import Statistics


class PersonaLab:
    """The engine's API for one caller."""

    def __init__(self, *, owner: str | None = None, database_url: str | None = None) -> None:
        self.caller = Caller(owner=owner, database_url=database_url)
        self.memories = Memories(self.caller)
        self.replies = Replies(self.caller)
        self.statistics = Statistics(self.caller)

    @property
    def owner(self) -> str | None:
        return self.caller.owner

    @property
    def database_url(self) -> str | None:
        return self.caller.database_url
