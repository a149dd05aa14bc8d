"""The director's fallback (seed 002 需求1 兜底机制): stall test, outline-point query, the two labelled layers."""

from __future__ import annotations

import pytest
from personalab.nodes.rules.director import (
    CURRENT_EVENTS_LIMIT,
    OTHER_EVENTS_LIMIT,
    RetrievedBlock,
    director_blocks,
    fallback_query,
    format_director_blocks,
    is_stalled,
)
from personalab.nodes.rules.plot import apply_progress, new_plot_state

CURRENT = "【当前剧情事件】（这些是当前剧情中实际发生的事件）"
REFERENCE = "【剧情经验参考】（其他剧情中的类似情节，仅供参考剧情走向，不代表当前剧情的事实）"
OUTLINE = ["发现背叛者的线索", "潜入敌人据点", "与仇人对峙", "做出关键选择"]


def test_the_seed_weights() -> None:
    assert (CURRENT_EVENTS_LIMIT, OTHER_EVENTS_LIMIT) == (15, 5)


@pytest.mark.parametrize(
    ("current", "last", "stalled"),
    [(3, 0, True), (2, 0, False), (5, 2, True), (4, 2, False), (12, 2, True), (2, 2, False)],
)
def test_stalled_after_three_turns_without_a_marker(current: int, last: int, stalled: bool) -> None:
    assert is_stalled(current, last) is stalled


def test_the_threshold_can_be_changed() -> None:
    assert is_stalled(7, 2, threshold=5) and not is_stalled(6, 2, threshold=5)


@pytest.mark.parametrize(
    ("args", "name"), [((-1, 0), "current_turn"), ((3, "0"), "last_progress_turn"), ((3, 0, 0), "threshold")]
)
def test_bad_turns_are_value_errors(args: tuple, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        is_stalled(*args)


def test_the_fallback_query_names_the_current_point() -> None:
    plot = apply_progress(new_plot_state(OUTLINE), [{"index": 3, "status": "in_progress"}], 4)
    assert fallback_query(plot) == "故事大纲第3点：与仇人对峙"


def test_a_bad_plot_state_has_no_query() -> None:
    with pytest.raises(ValueError, match="current_plot_index"):
        fallback_query({**new_plot_state(OUTLINE), "current_plot_index": 9})


def test_the_two_layers_are_titled_as_in_the_seed() -> None:
    text = format_director_blocks(["主角发现了叛徒的记号", {"text": "主角潜入了据点"}], ["另一个故事里主角放过了仇人"])
    assert text == (
        f"{CURRENT}\n1. 主角发现了叛徒的记号\n2. 主角潜入了据点\n\n{REFERENCE}\n1. 另一个故事里主角放过了仇人"
    )


def test_the_layers_are_cut_to_15_and_5_best_first() -> None:
    blocks = director_blocks([f"当前{n}" for n in range(20)], [f"其他{n}" for n in range(8)])
    assert blocks == [
        RetrievedBlock(CURRENT, [f"当前{n}" for n in range(15)]),
        RetrievedBlock(REFERENCE, [f"其他{n}" for n in range(5)]),
    ]


def test_an_empty_layer_is_left_out() -> None:
    assert director_blocks(["当前事件"], []) == [RetrievedBlock(CURRENT, ["当前事件"])]
    assert director_blocks([], ["别处的经验"]) == [RetrievedBlock(REFERENCE, ["别处的经验"])]
    assert format_director_blocks([], []) == ""


def test_a_bad_event_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="director event"):
        director_blocks([42], [])
