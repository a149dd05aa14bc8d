"""Graph node end_turn: every path of a turn ends here, so "the turn is over" is said once.

The work the turn queued on the background writer (its event, memories, index rebuilds, layer maintenance;
seed 002 事件写入异步执行) is held back while the turn runs, so it never takes the interpreter from the reply;
from here on it may start.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from personalab.nodes.context import Context
from personalab.nodes.state import TurnState, TurnUpdate
from personalab.stores.background import turn_ended


def end_turn(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    turn_ended(state["instance_id"])
    return {}
