"""`PersonaLab`: the one object a front end (host app, CLI, HTTP routes, web app) holds (LAYOUT "one door").

Bound once to a caller (owner, database); each area of the engine is an attribute grouping its operations
(`api.characters.create(...)`, `api.instances.list()`, `api.dialogue.history(7)`, `api.cards.import_file(path)`).
Every operation checks the owner and runs as one transaction. An area's module is imported the first time the
area is used, so a command that lists instances loads neither the turn graph nor the vector store.

    from personalab.graph.api import PersonaLab
    api = PersonaLab()                                   # the local operator, the configured database
    character = api.characters.create({"name": "雷娜", "greetings": ["你来了。"]})
    background = api.backgrounds.create({"name": "废土", "outline": ["重逢", "追查", "真相"]})
    instance = api.instances.create({"character_id": character.id, "background_id": background.id})
    api.dialogue.history(instance.id)

Turns run through `personalab.graph.runner.run_turn` (the turn graph), or `api.dialogue.regenerate` / `edit`.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from personalab.graph.api.caller import Caller

if TYPE_CHECKING:
    from personalab.graph.api.admin import AdminApi
    from personalab.graph.api.cards import Cards
    from personalab.graph.api.core_memory import CoreMemoryApi
    from personalab.graph.api.dialogue import Dialogue
    from personalab.graph.api.knowledge import KnowledgeApi
    from personalab.graph.api.library import Backgrounds, Characters, Instances
    from personalab.graph.api.memory import Memories
    from personalab.graph.api.personas import Personas
    from personalab.graph.api.plot import PlotApi
    from personalab.graph.api.relations import RelationsApi
    from personalab.graph.api.replies import Replies
    from personalab.graph.api.statistics import Statistics
    from personalab.graph.api.suggestions import SuggestionsApi
    from personalab.graph.api.trigger_config import TriggerConfigApi
    from personalab.graph.api.worldbook import WorldbookApi


class PersonaLab:
    """The engine's API for one caller."""

    def __init__(self, *, owner: str | None = None, database_url: str | None = None) -> None:
        self.caller = Caller(owner=owner, database_url=database_url)

    @property
    def owner(self) -> str | None:
        return self.caller.owner

    @property
    def database_url(self) -> str | None:
        return self.caller.database_url

    @cached_property
    def characters(self) -> Characters:
        """Characters (seed 002 角色管理)."""
        from personalab.graph.api.library import Characters

        return Characters(self.caller)

    @cached_property
    def backgrounds(self) -> Backgrounds:
        """Backgrounds with their outlines (seed 002 背景管理)."""
        from personalab.graph.api.library import Backgrounds

        return Backgrounds(self.caller)

    @cached_property
    def instances(self) -> Instances:
        """Conversation instances (seed 002 会话实例管理; seed 004 导出)."""
        from personalab.graph.api.library import Instances

        return Instances(self.caller)

    @cached_property
    def personas(self) -> Personas:
        """User personas: the name and description the user plays as, one per instance (issue 28)."""
        from personalab.graph.api.personas import Personas

        return Personas(self.caller)

    @cached_property
    def dialogue(self) -> Dialogue:
        """An instance's dialogue tree: history, siblings, rewind, swipe, regenerate, edit, sessions (seed 000)."""
        from personalab.graph.api.dialogue import Dialogue

        return Dialogue(self.caller)

    @cached_property
    def cards(self) -> Cards:
        """SillyTavern character cards in and out (issue 15)."""
        from personalab.graph.api.cards import Cards

        return Cards(self.caller)

    @cached_property
    def trigger_config(self) -> TriggerConfigApi:
        """Seed 004's memory trigger configuration per scope (global, character, instance)."""
        from personalab.graph.api.trigger_config import TriggerConfigApi

        return TriggerConfigApi(self.caller)

    @cached_property
    def core_memory(self) -> CoreMemoryApi:
        """Core memory: versions, diff, rollback (seed 002 需求2)."""
        from personalab.graph.api.core_memory import CoreMemoryApi

        return CoreMemoryApi(self.caller)

    @cached_property
    def plot(self) -> PlotApi:
        """The outline's current point and statuses, plot nodes per branch (seed 002 需求1, seed 003)."""
        from personalab.graph.api.plot import PlotApi

        return PlotApi(self.caller)

    @cached_property
    def relations(self) -> RelationsApi:
        """The character's relations on the current branch: with the user and with the scene's other participants
        (seed 003, issue 26)."""
        from personalab.graph.api.relations import RelationsApi

        return RelationsApi(self.caller)

    @cached_property
    def suggestions(self) -> SuggestionsApi:
        """World-book updates the post-turn review proposed: approve, reject (seed 003)."""
        from personalab.graph.api.suggestions import SuggestionsApi

        return SuggestionsApi(self.caller)

    @cached_property
    def knowledge(self) -> KnowledgeApi:
        """The knowledge library (global / character / instance facts)."""
        from personalab.graph.api.knowledge import KnowledgeApi

        return KnowledgeApi(self.caller)

    @cached_property
    def worldbook(self) -> WorldbookApi:
        """The world book: single entries, settings, import and export (seed 004)."""
        from personalab.graph.api.worldbook import WorldbookApi

        return WorldbookApi(self.caller)

    @cached_property
    def admin(self) -> AdminApi:
        """Administration: turn locks, doctor, migrations (the operator only)."""
        from personalab.graph.api.admin import AdminApi

        return AdminApi(self.caller)

    @cached_property
    def memories(self) -> Memories:
        """An instance's long-term memory: list, search, show, add, edit, pin, delete, export (seeds 001 / 004)."""
        from personalab.graph.api.memory import Memories

        return Memories(self.caller)

    @cached_property
    def replies(self) -> Replies:
        """What fed each reply: the memories, world book, knowledge and cuts of its prompt."""
        from personalab.graph.api.replies import Replies

        return Replies(self.caller)

    @cached_property
    def statistics(self) -> Statistics:
        """Statistics of an instance's memory (seed 004 记忆统计)."""
        from personalab.graph.api.statistics import Statistics

        return Statistics(self.caller)
