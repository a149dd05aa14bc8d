"""Run-time configuration of the graph (LangGraph `context_schema`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class Context:
    """Whose memory is built: the character of the instance unless the caller names one."""

    database_url: str | None = None
    role_id: int | None = None
    script_role_id: str | None = None
    display_name: str | None = None
