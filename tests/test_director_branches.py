"""The director's plot nodes per branch (issue 25 "plot nodes per branch"): `api.plot.branches` gives every branch of
an instance's dialogue tree (regenerations, edits, rewinds) with the plot nodes reached on it, the current one first;
one branch by its leaf line; bad input names the branch. The web page's selector is in tests/test_console_browser.py.
SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from personalab.graph.api import PersonaLab
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound
from personalab.stores.db import session_scope
from personalab.stores.review import record_plot_node


def test_plot_nodes_per_branch(db_url: str) -> None:
    instance = create_sample_instance(db_url)
    api = PersonaLab(database_url=db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        run_turn(graph, ctx, instance, "我们去北方吧。")
        first_leaf = api.dialogue.history(instance)["leaf"]
        run_turn(graph, ctx, instance, "继续前进。")
        old_leaf = api.dialogue.history(instance)["leaf"]
        with session_scope(db_url) as session:
            record_plot_node(session, instance, 1, "turning_point", "决定去北方", first_leaf)
            record_plot_node(session, instance, 2, None, "穿过废墟", old_leaf)
        api.dialogue.rewind(instance, first_leaf)
        run_turn(graph, ctx, instance, "还是回港口吧。")
        new_leaf = api.dialogue.history(instance)["leaf"]
        with session_scope(db_url) as session:
            record_plot_node(session, instance, 2, None, "回到港口", new_leaf)

    branches = api.plot.branches(instance)
    assert [b["leaf"] for b in branches] == [new_leaf, old_leaf]
    assert [b["current"] for b in branches] == [True, False]
    assert [n["summary"] for n in branches[0]["nodes"]] == ["决定去北方", "回到港口"]
    assert [n["summary"] for n in branches[1]["nodes"]] == ["决定去北方", "穿过废墟"]
    assert branches[0]["last_line"] and branches[0]["lines"] == len(api.dialogue.history(instance)["lines"])
    (only,) = api.plot.branches(instance, leaf=old_leaf)
    assert only["leaf"] == old_leaf and not only["current"]

    # after a rewind the current branch ends inside the tree: it is a branch of its own, first
    api.dialogue.rewind(instance, first_leaf)
    branches = api.plot.branches(instance)
    assert branches[0]["leaf"] == first_leaf and branches[0]["current"]
    assert [n["summary"] for n in branches[0]["nodes"]] == ["决定去北方"]
    assert {b["leaf"] for b in branches[1:]} == {old_leaf, new_leaf}

    with pytest.raises(NotFound, match=f"branch {first_leaf - 1}"):
        api.plot.branches(instance, leaf=first_leaf - 1)  # a line inside the tree that is no branch's end
    with pytest.raises(InvalidInput, match="branch"):
        api.plot.branches(instance, leaf="7")  # type: ignore[arg-type]
    with pytest.raises(InstanceNotFound):
        PersonaLab(owner="mallory", database_url=db_url).plot.branches(instance)
