"""The graph served by `langgraph.json`: fetch an instance's history, build the character's memory."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graph.context import Context
from graph.state import TurnState
from nodes.history_fetch import history_fetch
from nodes.memory_build import memory_build

builder = StateGraph(TurnState, context_schema=Context)
builder.add_node("history_fetch", history_fetch)
builder.add_node("memory_build", memory_build)
builder.add_edge(START, "history_fetch")
builder.add_edge("history_fetch", "memory_build")
builder.add_edge("memory_build", END)

graph = builder.compile()
graph.name = "PersonaLab"
