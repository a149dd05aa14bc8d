"""stores.review on SQLite and PostgreSQL: plot nodes, and world-book suggestions that reach the world book
only when approved."""

from __future__ import annotations

from typing import Any

import personalab.stores.review as review_store
import pytest
from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput
from personalab.nodes.rules.review.effects import plan_review_effects, worldbook_suggestion_from_turn
from personalab.nodes.rules.review.rules import run_rule_review
from personalab.nodes.rules.review.types import ReviewInput
from personalab.stores.db import session_scope
from personalab.stores.review import (
    SuggestionDecidedError,
    SuggestionNotFoundError,
    approve_suggestion,
    create_suggestion,
    get_suggestion,
    list_plot_nodes,
    list_suggestions,
    record_plot_node,
    reject_suggestion,
    save_review_effects,
)
from personalab.stores.review_tables import WorldbookSuggestionRow
from personalab.stores.saves import create_background, create_role, create_save
from personalab.stores.worldbook import GLOBAL, Scope, delete_worldbook_entry, list_worldbook, worldbook_for_instance

PROPOSAL = worldbook_suggestion_from_turn(
    "我们决定离开营地,去北方的废墟寻找净水器。",
    "艾拉点点头:废墟里的净水器也许还能用。",
    {"level": "turning_point", "text": "前往北方废墟"},
    12,
)


@pytest.fixture
def ids(db_url: str) -> dict[str, Any]:
    """Two instances of one character, and one instance without a character."""
    with session_scope(db_url) as s:
        role = create_role(s, "艾拉")
        background = create_background(s, "废土", "核战后的世界", ["离开营地", "找到净水器"])
        one = create_save(s, role.id, background.id)
        two = create_save(s, role.id, background.id)
        lone = create_save(s, None, None)
        return {"url": db_url, "role": role.id, "one": one.id, "two": two.id, "lone": lone.id}


def suggest(ids: dict[str, Any], save: str = "one", **changes: Any) -> int:
    with session_scope(ids["url"]) as s:
        return create_suggestion(s, ids[save], **{**PROPOSAL, **changes}).id


def world_book(ids: dict[str, Any]) -> list[Any]:
    """Every world-book entry of every scope."""
    with session_scope(ids["url"]) as s:
        entries = list_worldbook(s, GLOBAL) + list_worldbook(s, Scope(role_id=ids["role"]))
        for save in ("one", "two", "lone"):
            entries += list_worldbook(s, Scope(save_id=ids[save]))
        return entries


def status_of(ids: dict[str, Any], suggestion_id: int) -> str:
    with session_scope(ids["url"]) as s:
        return get_suggestion(s, suggestion_id).status


# --- plot nodes -----------------------------------------------------------------------------------


def test_plot_nodes_are_listed_per_instance_in_turn_order(ids: dict[str, Any]) -> None:
    with session_scope(ids["url"]) as s:
        record_plot_node(s, ids["one"], 9, "turning_point", "转折点：离开营地")
        record_plot_node(s, ids["one"], 3, "important", "重要选择：收留流浪者")
        record_plot_node(s, ids["two"], 5, "ending", "结局：留在营地")
    with session_scope(ids["url"]) as s:
        one = list_plot_nodes(s, ids["one"])
        two = list_plot_nodes(s, ids["two"])
    assert [(n.turn, n.level, n.summary) for n in one] == [
        (3, "important", "重要选择：收留流浪者"),
        (9, "turning_point", "转折点：离开营地"),
    ]
    assert [n.turn for n in two] == [5]
    assert one[0].to_dict()["created_at"].endswith("+00:00")


def test_recording_a_turn_again_replaces_its_plot_node(ids: dict[str, Any]) -> None:
    with session_scope(ids["url"]) as s:
        first = record_plot_node(s, ids["one"], 4, "important", "旧的回复")
    with session_scope(ids["url"]) as s:
        again = record_plot_node(s, ids["one"], 4, "turning_point", "重新生成的回复")
    with session_scope(ids["url"]) as s:
        nodes = list_plot_nodes(s, ids["one"])
    assert again.id == first.id
    assert [(n.level, n.summary) for n in nodes] == [("turning_point", "重新生成的回复")]


def test_a_plot_node_without_a_choice_level_is_allowed(ids: dict[str, Any]) -> None:
    with session_scope(ids["url"]) as s:
        assert record_plot_node(s, ids["one"], 1, None, "模型建议的剧情节点").level is None


@pytest.mark.parametrize(
    ("args", "error", "named"),
    [
        ((999, 1, "important", "x"), InstanceNotFound, "instance 999"),
        (("one", -1, "important", "x"), ValueError, "turn"),
        (("one", 1, "huge", "x"), ValueError, "plot node level"),
        (("one", 1, "important", "  "), ValueError, "summary"),
        (("one", 1, "important", "长" * 2_001), ValueError, "summary"),
    ],
)
def test_bad_plot_nodes_are_refused_and_nothing_is_stored(
    ids: dict[str, Any], args: tuple[Any, ...], error: type[Exception], named: str
) -> None:
    save = ids[args[0]] if isinstance(args[0], str) else args[0]
    with pytest.raises(error, match=named), session_scope(ids["url"]) as s:
        record_plot_node(s, save, *args[1:])
    with session_scope(ids["url"]) as s:
        assert list_plot_nodes(s, ids["one"]) == []
        with pytest.raises(InstanceNotFound):
            list_plot_nodes(s, 999)


# --- suggestions: nothing without approval --------------------------------------------------------


def test_a_suggestion_is_pending_and_leaves_the_world_book_alone(ids: dict[str, Any]) -> None:
    sid = suggest(ids)
    with session_scope(ids["url"]) as s:
        (item,) = list_suggestions(s)
    assert item.id == sid and item.status == "pending" and item.save_id == ids["one"]
    assert (item.turn, item.choice_level, item.scope) == (12, "turning_point", "instance")
    assert item.keywords == tuple(PROPOSAL["keywords"]) and item.content == PROPOSAL["content"]
    assert item.decided_at is None and item.worldbook_entry_id is None and item.created_at is not None
    assert world_book(ids) == []


def test_approving_adds_the_entry_to_the_instance_only(ids: dict[str, Any]) -> None:
    sid = suggest(ids)
    with session_scope(ids["url"]) as s:
        approved = approve_suggestion(s, sid)
    assert approved.status == "approved" and approved.decided_at is not None
    with session_scope(ids["url"]) as s:
        (entry,) = list_worldbook(s, Scope(save_id=ids["one"]))
        assert worldbook_for_instance(s, ids["two"]) == []
        assert get_suggestion(s, sid).worldbook_entry_id == int(entry.id)
    assert entry.content == PROPOSAL["content"] and list(entry.keywords) == PROPOSAL["keywords"]
    assert (entry.title, entry.kind, entry.trigger_type) == ("第12轮转折点", "episodic", "keyword")
    assert approved.worldbook_entry_id == int(entry.id)
    assert len(world_book(ids)) == 1


def test_rejecting_leaves_the_world_book_alone(ids: dict[str, Any]) -> None:
    sid = suggest(ids)
    with session_scope(ids["url"]) as s:
        rejected = reject_suggestion(s, sid)
    assert rejected.status == "rejected" and rejected.decided_at is not None and rejected.worldbook_entry_id is None
    assert world_book(ids) == []


def test_approving_with_edits_uses_the_edited_content_and_keywords(ids: dict[str, Any]) -> None:
    sid = suggest(ids)
    with session_scope(ids["url"]) as s:
        approve_suggestion(s, sid, content="北方废墟里有一台还能用的净水器。", keywords=["净水器", " ", "净水器"])
    (entry,) = world_book(ids)
    assert entry.content == "北方废墟里有一台还能用的净水器。" and entry.keywords == ("净水器",)


def test_a_suggestion_without_keywords_becomes_a_semantic_entry(ids: dict[str, Any]) -> None:
    sid = suggest(ids, keywords=[], trigger_type=None)
    with session_scope(ids["url"]) as s:
        assert get_suggestion(s, sid).trigger_type == "semantic"
        approve_suggestion(s, sid)
    assert [e.trigger_type for e in world_book(ids)] == ["semantic"]


def test_character_and_global_scopes(ids: dict[str, Any]) -> None:
    role_sid = suggest(ids, scope="character")
    global_sid = suggest(ids, save="two", scope="global")
    with session_scope(ids["url"]) as s:
        approve_suggestion(s, role_sid)
        approve_suggestion(s, global_sid)
        assert len(list_worldbook(s, Scope(role_id=ids["role"]))) == 1
        assert len(list_worldbook(s, GLOBAL)) == 1
        assert list_worldbook(s, Scope(save_id=ids["one"])) == []


# --- suggestions: decided, unknown, bad -----------------------------------------------------------


@pytest.mark.parametrize("first", ["approve", "reject"])
@pytest.mark.parametrize("then", ["approve", "reject"])
def test_deciding_twice_is_refused_naming_id_and_status(ids: dict[str, Any], first: str, then: str) -> None:
    actions = {"approve": approve_suggestion, "reject": reject_suggestion}
    sid = suggest(ids)
    with session_scope(ids["url"]) as s:
        actions[first](s, sid)
    before = world_book(ids)
    status = "approved" if first == "approve" else "rejected"
    with pytest.raises(SuggestionDecidedError, match=rf"suggestion {sid} is already {status}"):
        with session_scope(ids["url"]) as s:
            actions[then](s, sid)
    assert status_of(ids, sid) == status
    assert world_book(ids) == before


def test_unknown_ids_are_refused_naming_the_id(ids: dict[str, Any]) -> None:
    for action in (approve_suggestion, reject_suggestion, get_suggestion):
        with pytest.raises(SuggestionNotFoundError, match="suggestion 4242 does not exist"):
            with session_scope(ids["url"]) as s:
                action(s, 4242)
    assert issubclass(SuggestionNotFoundError, LookupError) and issubclass(SuggestionDecidedError, ValueError)


def test_a_stale_session_cannot_approve_a_suggestion_a_second_time(ids: dict[str, Any]) -> None:
    sid = suggest(ids)
    with session_scope(ids["url"]) as late:
        # this process has read the suggestion as pending (the row stays in its session) ...
        seen = late.get(WorldbookSuggestionRow, sid)
        assert seen is not None and seen.status == "pending"
        # ... when another process approves it
        with session_scope(ids["url"]) as first:
            approve_suggestion(first, sid)
        with pytest.raises(SuggestionDecidedError, match=f"suggestion {sid} is already approved"):
            approve_suggestion(late, sid)
    assert len(world_book(ids)) == 1


def test_approval_is_one_transaction(ids: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    sid = suggest(ids)

    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(review_store, "add_worldbook_entry", broken)
    with pytest.raises(RuntimeError), session_scope(ids["url"]) as s:
        approve_suggestion(s, sid)
    assert status_of(ids, sid) == "pending"
    assert world_book(ids) == []


def test_a_bad_edit_on_approval_keeps_the_suggestion_pending(ids: dict[str, Any]) -> None:
    sid = suggest(ids)
    with pytest.raises(ValueError, match=f"suggestion {sid}"), session_scope(ids["url"]) as s:
        approve_suggestion(s, sid, content="  ")
    with pytest.raises(ValueError, match="keywords"), session_scope(ids["url"]) as s:
        approve_suggestion(s, sid, keywords="净水器")  # type: ignore[arg-type]
    assert status_of(ids, sid) == "pending"
    assert world_book(ids) == []


@pytest.mark.parametrize(
    ("save", "changes", "error", "named"),
    [
        ("missing", {}, InstanceNotFound, "instance 999"),
        ("one", {"content": " "}, ValueError, "content"),
        ("one", {"turn": -3}, ValueError, "turn"),
        ("one", {"choice_level": "huge"}, ValueError, "choice_level"),
        ("one", {"scope": "world"}, ValueError, "scope"),
        ("lone", {"scope": "character"}, ValueError, "has no character"),
        ("one", {"keywords": [], "trigger_type": "keyword"}, ValueError, "keyword"),
        ("one", {"trigger_type": "temporal"}, ValueError, "trigger_type"),
        ("one", {"kind": "dream"}, ValueError, "kind"),
        ("one", {"keywords": ["/[unclosed/"]}, ValueError, "keywords"),
    ],
)
def test_bad_suggestions_are_refused_and_nothing_is_stored(
    ids: dict[str, Any], save: str, changes: dict[str, Any], error: type[Exception], named: str
) -> None:
    save_id = ids.get(save, 999)
    with pytest.raises(error, match=named), session_scope(ids["url"]) as s:
        create_suggestion(s, save_id, **{**PROPOSAL, **changes})
    with session_scope(ids["url"]) as s:
        assert list_suggestions(s) == []


# --- suggestions: listing, duplicates, later deletion ---------------------------------------------


def test_list_filters_by_instance_and_status(ids: dict[str, Any]) -> None:
    a = suggest(ids, turn=1)
    b = suggest(ids, turn=2)
    c = suggest(ids, save="two", turn=1)
    with session_scope(ids["url"]) as s:
        reject_suggestion(s, b)
    with session_scope(ids["url"]) as s:
        assert [x.id for x in list_suggestions(s)] == [a, b, c]
        assert [x.id for x in list_suggestions(s, save_id=ids["one"])] == [a, b]
        assert [x.id for x in list_suggestions(s, status="pending")] == [a, c]
        assert [x.id for x in list_suggestions(s, save_id=ids["one"], status="rejected")] == [b]
        assert list_suggestions(s, status="approved") == []
        with pytest.raises(ValueError, match="status must be one of pending, approved, rejected"):
            list_suggestions(s, status="done")
        with pytest.raises(InstanceNotFound, match="instance 999"):
            list_suggestions(s, save_id=999)


def test_a_pending_suggestion_of_the_same_turn_is_replaced_not_duplicated(ids: dict[str, Any]) -> None:
    first = suggest(ids, content="旧的回复")
    again = suggest(ids, content="重新生成的回复")
    assert again == first
    with session_scope(ids["url"]) as s:
        reject_suggestion(s, first)
    third = suggest(ids, content="又一次")
    with session_scope(ids["url"]) as s:
        items = list_suggestions(s)
    assert third != first
    assert [(x.content, x.status) for x in items] == [("重新生成的回复", "rejected"), ("又一次", "pending")]


def test_deleting_an_approved_entry_later_is_still_possible(ids: dict[str, Any]) -> None:
    sid = suggest(ids)
    with session_scope(ids["url"]) as s:
        entry_id = approve_suggestion(s, sid).worldbook_entry_id
    assert entry_id is not None
    with session_scope(ids["url"]) as s:
        delete_worldbook_entry(s, entry_id)
    with session_scope(ids["url"]) as s:
        after = get_suggestion(s, sid)
    assert (after.status, after.worldbook_entry_id) == ("approved", None)
    assert world_book(ids) == []


# --- one reviewed turn ----------------------------------------------------------------------------


def test_save_review_effects_stores_the_plan_of_a_turning_point(ids: dict[str, Any]) -> None:
    choice = {"level": "turning_point", "text": "离开营地"}
    message, reply = "我们离开营地吧", "好,天亮就走。"
    out = run_rule_review(ReviewInput("c", "r", "u", message, reply, selected_choice=choice))
    plan = plan_review_effects(
        out, relationship=None, user_message=message, assistant_reply=reply, choice=choice, turn=6
    )
    with session_scope(ids["url"]) as s:
        stored = save_review_effects(s, ids["one"], plan)
    assert stored["plot_node"].turn == 6 and stored["worldbook_suggestion"].status == "pending"
    with session_scope(ids["url"]) as s:
        assert [n.summary for n in list_plot_nodes(s, ids["one"])] == [plan["plot_node"]["summary"]]
        assert [x.content for x in list_suggestions(s, save_id=ids["one"])] == [plan["worldbook_suggestion"]["content"]]
    assert world_book(ids) == []


def test_save_review_effects_of_small_talk_stores_nothing(ids: dict[str, Any]) -> None:
    out = run_rule_review(ReviewInput("c", "r", "u", "你好", "你好。"))
    plan = plan_review_effects(
        out, relationship=None, user_message="你好", assistant_reply="你好。", choice=None, turn=1
    )
    with session_scope(ids["url"]) as s:
        assert save_review_effects(s, ids["one"], plan) == {"plot_node": None, "worldbook_suggestion": None}
        assert list_plot_nodes(s, ids["one"]) == [] and list_suggestions(s) == []


@pytest.mark.parametrize(
    ("plan", "named"),
    [
        ("plot", "review plan must be a mapping"),
        ({"plot_node": {"turn": 1, "summary": "x"}}, r"review plan plot_node .*missing \['level'\]"),
        ({"plot_node": ["x"]}, "review plan plot_node must be a mapping"),
        (
            {"worldbook_suggestion": {**PROPOSAL, "mood": "happy"}},
            r"review plan worldbook_suggestion .*unknown \['mood'\]",
        ),
    ],
)
def test_a_malformed_plan_is_refused_naming_the_part(ids: dict[str, Any], plan: Any, named: str) -> None:
    with pytest.raises(InvalidInput, match=named), session_scope(ids["url"]) as s:
        save_review_effects(s, ids["one"], plan)
    with session_scope(ids["url"]) as s:
        assert list_plot_nodes(s, ids["one"]) == [] and list_suggestions(s) == []
