"""The four layers and their flow (seed 001 记忆流转机制): every transition of one maintenance step."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from personalab.nodes.rules.memory_layers import (
    Layer,
    LayerConfig,
    LayerMemory,
    LayerPolicy,
    MaintenancePlan,
    check_importance,
    decay_activity,
    initial_importance,
    parse_layer,
    parse_type,
    plan_maintenance,
    summary_groups,
)

CONFIG = LayerConfig()


def mem(id: int = 1, **fields: object) -> LayerMemory:
    base: dict[str, object] = {
        "layer": Layer.ACTIVE,
        "importance": 0.5,
        "activity": 1.0,
        "activity_turn": 0,
        "layer_since_turn": 0,
        "turn": 0,
    }
    base.update(fields)
    return LayerMemory(id=id, **base)  # type: ignore[arg-type]


def after(plan: MaintenancePlan, memory_id: int) -> LayerMemory | None:
    return next((m for m in plan.updated if m.id == memory_id), None)


def test_defaults_follow_the_seed_capacities() -> None:
    assert [CONFIG.policy(layer).capacity for layer in Layer] == [10, 50, 200, 1000]


def test_activity_decays_exponentially() -> None:
    assert decay_activity(1.0, 0.1, 0) == 1.0
    assert decay_activity(1.0, 0.1, 5) == pytest.approx(math.exp(-0.5))
    assert decay_activity(0.8, 0.0, 1000) == 0.8
    assert decay_activity(1.0, 0.1, -3) == 1.0  # a clock going backwards never raises activity


def test_a_new_memory_stays_active_while_its_activity_is_high() -> None:
    plan = plan_maintenance([mem()], turn=3)
    m = after(plan, 1)
    assert m is not None and m.layer is Layer.ACTIVE
    assert m.activity == pytest.approx(math.exp(-0.3))
    assert m.activity_turn == 3
    assert plan.transitions == ()


def test_active_memory_moves_to_situational_when_its_activity_falls_below_the_floor() -> None:
    plan = plan_maintenance([mem(importance=0.5)], turn=10)
    m = after(plan, 1)
    assert m is not None and m.layer is Layer.SITUATIONAL
    # left active at activity 0.5 after ln 2 / 0.1 ≈ 6.9 turns, then decayed at the situational rate
    assert m.activity == pytest.approx(0.5 * math.exp(-0.01 * (10 - math.log(2) / 0.1)))
    assert m.layer_since_turn == 6
    assert [(t.from_layer, t.to_layer, t.reason) for t in plan.transitions] == [
        (Layer.ACTIVE, Layer.SITUATIONAL, "decayed")
    ]


def test_trivial_memory_fades_when_it_leaves_active() -> None:
    plan = plan_maintenance([mem(importance=0.1)], turn=10)
    assert plan.deleted == (1,)
    assert plan.transitions[0].to_layer is None and plan.transitions[0].reason == "faded"


def test_situational_memory_moves_to_the_event_log() -> None:
    plan = plan_maintenance([mem(layer=Layer.SITUATIONAL, activity=0.5, importance=0.5)], turn=100)
    m = after(plan, 1)
    assert m is not None and m.layer is Layer.EVENT_LOG


def test_low_importance_situational_memory_fades() -> None:
    plan = plan_maintenance([mem(layer=Layer.SITUATIONAL, activity=0.5, importance=0.3)], turn=100)
    assert plan.deleted == (1,)


def test_important_event_log_memory_is_archived() -> None:
    plan = plan_maintenance([mem(layer=Layer.EVENT_LOG, activity=0.2, importance=0.7)], turn=2000)
    m = after(plan, 1)
    assert m is not None and m.layer is Layer.ARCHIVE


def test_medium_event_log_memory_fades() -> None:
    plan = plan_maintenance([mem(layer=Layer.EVENT_LOG, activity=0.2, importance=0.5)], turn=2000)
    assert plan.deleted == (1,)


def test_archive_never_decays() -> None:
    plan = plan_maintenance([mem(layer=Layer.ARCHIVE, activity=0.3, importance=0.9)], turn=1_000_000)
    m = after(plan, 1)
    assert m is None or (m.layer is Layer.ARCHIVE and m.activity == 0.3)
    assert plan.deleted == ()


def test_an_important_memory_goes_all_the_way_to_the_archive_in_one_long_step() -> None:
    plan = plan_maintenance([mem(importance=0.8)], turn=5000)
    m = after(plan, 1)
    assert m is not None and m.layer is Layer.ARCHIVE
    assert [t.to_layer for t in plan.transitions] == [Layer.SITUATIONAL, Layer.EVENT_LOG, Layer.ARCHIVE]


def test_the_outcome_does_not_depend_on_how_often_maintenance_runs() -> None:
    memories = [mem(i, importance=imp, turn=0) for i, imp in enumerate((0.1, 0.3, 0.5, 0.7), start=1)]
    once = plan_maintenance(memories, turn=400)
    state = {m.id: m for m in memories}
    for turn in range(10, 401, 10):
        plan = plan_maintenance(state.values(), turn=turn)
        state.update({m.id: m for m in plan.updated})
        for gone in plan.deleted:
            del state[gone]
    assert set(once.deleted) == {i for i in (1, 2, 3, 4) if i not in state}
    for memory in once.updated:
        assert state[memory.id].layer is memory.layer
        assert state[memory.id].activity == pytest.approx(memory.activity)


def test_over_capacity_the_least_active_memories_move_down() -> None:
    config = replace(CONFIG, active=replace(CONFIG.active, capacity=2))
    memories = [mem(i, activity=a, activity_turn=5) for i, a in ((1, 0.9), (2, 0.6), (3, 0.95))]
    plan = plan_maintenance(memories, turn=5, config=config)
    moved = [t for t in plan.transitions if t.reason == "over_capacity"]
    assert [(t.id, t.to_layer) for t in moved] == [(2, Layer.SITUATIONAL)]


def test_over_capacity_ties_go_to_the_less_important_then_the_older() -> None:
    config = replace(CONFIG, active=replace(CONFIG.active, capacity=1))
    memories = [mem(1, importance=0.5, turn=1), mem(2, importance=0.4, turn=2), mem(3, importance=0.5, turn=0)]
    plan = plan_maintenance(memories, turn=0, config=config)
    assert [t.id for t in plan.transitions] == [2, 3]


def test_overflow_pushed_out_of_a_layer_is_checked_against_the_next_layer() -> None:
    config = replace(
        CONFIG,
        active=replace(CONFIG.active, capacity=1),
        situational=replace(CONFIG.situational, capacity=0),
    )
    plan = plan_maintenance([mem(1, activity=0.9), mem(2, activity=0.8, importance=0.45)], turn=0, config=config)
    assert [(t.id, t.from_layer, t.to_layer) for t in plan.transitions] == [
        (2, Layer.ACTIVE, Layer.SITUATIONAL),
        (2, Layer.SITUATIONAL, Layer.EVENT_LOG),
    ]


def test_over_capacity_in_the_archive_the_least_important_fade() -> None:
    config = replace(CONFIG, archive=replace(CONFIG.archive, capacity=2))
    memories = [mem(i, layer=Layer.ARCHIVE, importance=imp) for i, imp in ((1, 0.9), (2, 0.6), (3, 0.8))]
    plan = plan_maintenance(memories, turn=0, config=config)
    assert plan.deleted == (2,)


def test_a_recalled_memory_comes_back_up_one_layer() -> None:
    recalled = mem(layer=Layer.ARCHIVE, importance=0.8, activity=1.0, activity_turn=90, layer_since_turn=10)
    plan = plan_maintenance([replace(recalled, last_mentioned_turn=90)], turn=95)
    m = after(plan, 1)
    assert m is not None and m.layer is Layer.EVENT_LOG and m.layer_since_turn == 90
    assert plan.transitions[0].reason == "recalled"
    again = plan_maintenance([m], turn=100)
    assert all(t.reason != "recalled" for t in again.transitions)  # once per recall


def test_a_memory_mentioned_before_it_entered_its_layer_is_not_recalled() -> None:
    memory = mem(layer=Layer.SITUATIONAL, activity=0.45, activity_turn=20, layer_since_turn=20, last_mentioned_turn=5)
    plan = plan_maintenance([memory], turn=20)
    assert all(t.reason != "recalled" for t in plan.transitions)


def test_recall_never_lifts_a_memory_that_could_not_come_back_down() -> None:
    weak = mem(layer=Layer.ARCHIVE, importance=0.3, activity=1.0, activity_turn=90, last_mentioned_turn=90)
    plan = plan_maintenance([weak], turn=95)
    assert plan.transitions == () and plan.deleted == ()


def test_recall_can_be_switched_off() -> None:
    recalled = mem(layer=Layer.ARCHIVE, importance=0.8, activity_turn=90, last_mentioned_turn=90)
    plan = plan_maintenance([recalled], turn=95, config=replace(CONFIG, reactivate_on_recall=False))
    assert plan.transitions == ()


@pytest.mark.parametrize("flag", ["pinned", "user_edited"])
def test_pinned_and_user_edited_memories_are_never_decayed_moved_or_deleted(flag: str) -> None:
    protected = mem(importance=0.0, activity=0.01, **{flag: True})
    plan = plan_maintenance([protected], turn=100_000)
    assert plan.updated == () and plan.deleted == () and plan.transitions == ()
    assert plan.counts[Layer.ACTIVE.value] == 1


def test_protected_memories_do_not_count_against_capacity() -> None:
    config = replace(CONFIG, active=replace(CONFIG.active, capacity=1))
    memories = [mem(i, pinned=True) for i in range(1, 6)] + [mem(9, activity=0.9)]
    plan = plan_maintenance(memories, turn=0, config=config)
    assert plan.transitions == ()
    assert plan.counts[Layer.ACTIVE.value] == 6


def test_counts_per_layer_after_the_step() -> None:
    memories = [mem(1), mem(2, layer=Layer.ARCHIVE, importance=0.9), mem(3, importance=0.1, activity=0.1)]
    plan = plan_maintenance(memories, turn=0)
    assert plan.counts == {"active": 1, "situational": 0, "event_log": 0, "archive": 1}


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity -1"):
        LayerPolicy(capacity=-1, decay_rate=0.1, min_activity=0.5, min_importance=0.0)
    with pytest.raises(ValueError, match="min_activity 1.5"):
        LayerPolicy(capacity=1, decay_rate=0.1, min_activity=1.5, min_importance=0.0)


def test_types_layers_and_importance_are_validated_by_name() -> None:
    assert parse_type("Episodic").value == "episodic"
    assert parse_layer("event_log") is Layer.EVENT_LOG
    with pytest.raises(ValueError, match="memory type 'dream'"):
        parse_type("dream")
    with pytest.raises(ValueError, match="memory layer 'deep'"):
        parse_layer("deep")
    for bad in (1.5, -0.1, float("nan"), "high", True):
        with pytest.raises(ValueError, match="importance"):
            check_importance(bad)


def test_initial_importance_by_type() -> None:
    assert initial_importance("event") > initial_importance("conversation") > initial_importance("internal")
    assert initial_importance("trait") >= 0.6  # traits are kept in the archive


def test_fading_memories_are_summarised_per_branch_of_the_dialogue_tree() -> None:
    """`summary_groups`: a summary's line lies at or below every memory it summarises (it never shows where one
    of them did not), memories of two branches never share one, and a branch point's memory is summarised
    apart, under the deepest line both branches below it share."""
    # 1 ─ 2 ─ 3 ─ 4 (branch A: 4)      memories: 10@2, 11@3, 12@4, 13@6, 14@7, 15@none, 16@9
    #          └ 5 ─ 6 ─ 7 (branch B)               8 ─ 9 (another root: an edited first line)
    parents = {1: None, 2: 1, 3: 2, 4: 3, 5: 3, 6: 5, 7: 6, 8: None, 9: 8}
    memories = {10: 2, 11: 3, 12: 4, 13: 6, 14: 7, 15: None, 16: 9}
    groups = summary_groups(memories, parents)
    assert groups == {3: [10, 11], 4: [12], 7: [13, 14], None: [15], 9: [16]}
    # one branch: everything goes under its deepest line
    assert summary_groups({1: 2, 2: 4, 3: 3}, parents) == {4: [1, 2, 3]}
    # a line the walk did not find (another instance's, or gone) is its own root; parents that loop end
    assert summary_groups({1: 99, 2: 4}, parents) == {99: [1], 4: [2]}
    assert summary_groups({1: 1, 2: 2}, {1: 2, 2: 1}) == {1: [1], 2: [2]}  # each under its own line
