"""The world-book updates the post-turn review proposed (seed 003 世界书更新), through the API (issue 23): listed per
instance and branch, approved (optionally edited first: the entry is then in the world book of its scope on every
branch) or rejected. Nothing reaches the world book until approved. A signed-in user sees and decides only the
suggestions of their own instances (another user's id: `NotFound` naming it); one for the character's book needs
the character to be theirs too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.story import check_id, instance_of
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.stores.db import session_scope
from personalab.stores.review import (
    STATUSES,
    approve_suggestion,
    get_suggestion,
    list_suggestions,
    reject_suggestion,
)

__all__ = ["STATUSES", "SuggestionsApi"]


class SuggestionsApi:
    """`api.suggestions`: list, get, approve, reject."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def list(
        self, *, instance_id: int | None = None, status: str | None = None, all_branches: bool = False
    ) -> list[dict[str, Any]]:
        """Suggestions, oldest first: of one instance (its current branch's; every branch's with
        `all_branches`), or all (the operator only); `status` pending / approved / rejected."""
        if instance_id is None and self.caller.owner is not None:
            raise InvalidInput("instance_id: a signed-in user lists the suggestions of one of their instances")
        with session_scope(self.caller.database_url) as session:
            if instance_id is not None:
                instance_of(session, self.caller, instance_id)
            items = list_suggestions(session, save_id=instance_id, status=status, all_branches=all_branches)
        return [item.to_dict() for item in items]

    def _check(self, suggestion_id: int, change: bool) -> None:
        check_id(suggestion_id, "suggestion id")
        if self.caller.owner is None:
            return
        with session_scope(self.caller.database_url) as session:
            suggestion = get_suggestion(session, suggestion_id)
            try:
                save = instance_of(session, self.caller, suggestion.save_id)
            except NotFound:
                raise NotFound(f"world-book suggestion {suggestion_id} does not exist") from None
            role_id = save.role_id if suggestion.scope == "character" else None
        if change and role_id is not None:
            self.caller.check_scope(role_id, change=True)

    def get(self, suggestion_id: int) -> dict[str, Any]:
        self._check(suggestion_id, False)
        with session_scope(self.caller.database_url) as session:
            return get_suggestion(session, suggestion_id).to_dict()

    def approve(
        self, suggestion_id: int, *, content: str | None = None, keywords: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Add the suggested entry (with `content` / `keywords` instead of the proposed ones) to the world book of
        its scope and mark it approved, in one transaction; an already decided one: `InvalidInput`."""
        self._check(suggestion_id, True)
        with session_scope(self.caller.database_url) as session:
            return approve_suggestion(session, suggestion_id, content=content, keywords=keywords).to_dict()

    def reject(self, suggestion_id: int) -> dict[str, Any]:
        """Mark a pending suggestion rejected; the world book is not touched."""
        self._check(suggestion_id, True)
        with session_scope(self.caller.database_url) as session:
            return reject_suggestion(session, suggestion_id).to_dict()
