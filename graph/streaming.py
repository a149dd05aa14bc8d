"""Showing a streamed reply as it arrives, without the director's `[PROGRESS:i:status]` markers: `MarkerFilter`
(nodes/rules/markers.py, also used by the reply model's stream in the graph, nodes/llm.py)."""

from __future__ import annotations

from personalab.nodes.rules.markers import MarkerFilter

__all__ = ["MarkerFilter"]
