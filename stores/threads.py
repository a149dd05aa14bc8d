"""The LangGraph thread of a conversation instance (uuid5 of its id): a light module, so that listing instances
with their thread ids loads no checkpointer."""

from __future__ import annotations

import uuid

INSTANCE_NAMESPACE = uuid.UUID("6f0c1d3e-4f7a-5b2c-9d8e-1a2b3c4d5e6f")


def thread_id_for(instance_id: int | str) -> str:
    """The LangGraph thread id of a conversation instance: uuid5 of its id."""
    return str(uuid.uuid5(INSTANCE_NAMESPACE, f"save:{instance_id}"))
