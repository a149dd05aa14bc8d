"""`api.memories` (issue 23): an instance's memories through the one door, on SQLite and PostgreSQL — list by layer,
type and seed 004's kind, paged, on the current branch unless asked for all; search with the turn's retrieval and its
scores; show with source and earlier versions; add, edit (old text kept, index and vector updated), pin, delete,
export and import. Bad ids and values are errors naming the item, and nothing changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from personalab.graph.api.facade import PersonaLab
from personalab.graph.api.schemas.memory import MemoryCreate, MemoryUpdate
from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.saves import append_lines, create_role, create_save


def _instance(url: str, owner: str | None = None) -> int:
    with session_scope(url) as session:
        role = create_role(session, "白小喵")
        save = create_save(session, role.id, None)
        save.owner = owner
        session.add(save)
        session.flush()
        return int(save.id or 0)


@pytest.fixture
def setup(db_url: str, data_dir: Path) -> tuple[PersonaLab, int]:
    return PersonaLab(database_url=db_url), _instance(db_url)


def snapshot(url: str, instance: int) -> list[dict[str, Any]]:
    return [m.model_dump() for m in MemoryStore(db_url=url).list_memories(instance, include_record=True)]


def test_add_list_by_layer_type_kind_and_pages(setup: tuple[PersonaLab, int]) -> None:
    api, instance = setup
    memories = api.memories
    a = memories.add(instance, MemoryCreate(content="和Mary是好朋友", type="relationship", importance=0.9))
    b = memories.add(instance, MemoryCreate(content="上周建造了新的防御塔", layer="archive"))
    c = memories.add(instance, MemoryCreate(content="想要离开废土", type="goal", tags=["梦想"]))
    assert (a.kind, b.kind, c.kind) == ("semantic", "episodic", "goal")
    assert [m.id for m in memories.list(instance).items] == [a.id, b.id, c.id]
    assert [m.id for m in memories.list(instance, layer="archive").items] == [b.id]
    assert [m.id for m in memories.list(instance, type="goal").items] == [c.id]
    assert [m.id for m in memories.list(instance, kind="semantic").items] == [a.id]
    page = memories.list(instance, offset=1, limit=1)
    assert page.total == 3 and [m.id for m in page.items] == [b.id]
    with pytest.raises(InvalidInput, match="memory kind 'dream'"):
        memories.list(instance, kind="dream")
    with pytest.raises(InvalidInput, match="memory layer 'deep'"):
        memories.list(instance, layer="deep")
    with pytest.raises(InvalidInput, match="limit 5000"):
        memories.list(instance, limit=5000)


def test_the_current_branch_by_default_all_branches_on_request(db_url: str, setup: tuple[PersonaLab, int]) -> None:
    api, instance = setup
    with session_scope(db_url) as session:
        root = append_lines(session, instance, [{"attribute": "user", "content": "出发"}])[0]
        left = append_lines(session, instance, [{"attribute": "user", "content": "走左边"}])[0]
        right = append_lines(session, instance, [{"attribute": "user", "content": "走右边"}], parent_line_id=root.id)[0]
    store = MemoryStore(db_url=db_url)
    here = store.add_memories(instance, [{"content": "走了右边的桥", "line_id": right.id}])[0]
    away = store.add_memories(instance, [{"content": "走了左边的隧道", "line_id": left.id}])[0]
    loose = store.add_memory(instance, "一直带着怀表")
    assert [m.id for m in api.memories.list(instance).items] == [here.id, loose.id]
    assert [m.id for m in api.memories.list(instance, all_branches=True).items] == [here.id, away.id, loose.id]
    assert api.memories.show(instance, away.id).source.on_current_branch is False
    assert api.memories.show(instance, here.id).source.line_text == "走右边"
    assert away.id not in {item.id for item in api.memories.search(instance, "左边的隧道").items}
    assert away.id in {item.id for item in api.memories.search(instance, "左边的隧道", all_branches=True).items}


def test_search_is_the_turns_retrieval_with_every_score(setup: tuple[PersonaLab, int]) -> None:
    api, instance = setup
    target = api.memories.add(instance, MemoryCreate(content="昨天和John讨论了种植计划", tags=["种植"]))
    api.memories.add(instance, MemoryCreate(content="我最喜欢吃鱼干"))
    result = api.memories.search(instance, "你还记得种植计划吗？")
    assert result.items[0].id == target.id and result.scene
    breakdown = result.items[0].breakdown
    for factor in ("context_relevance", "keyword", "vector", "recency", "importance", "diversity", "layer_priority"):
        assert isinstance(breakdown[factor], float), factor
    assert "bm25" in breakdown["paths"]
    assert api.memories.get(instance, target.id).mention_count == 0  # not marked unless asked
    api.memories.search(instance, "种植计划", mark_mentioned=True)
    assert api.memories.get(instance, target.id).mention_count == 1
    with pytest.raises(InvalidInput, match="query is empty"):
        api.memories.search(instance, "   ")


def test_edit_keeps_the_old_text_and_reindexes(db_url: str, setup: tuple[PersonaLab, int]) -> None:
    api, instance = setup
    memory = api.memories.add(instance, MemoryCreate(content="莱姆把金色怀表藏在旧仓库"))
    edited = api.memories.edit(instance, memory.id, MemoryUpdate(content="莱姆把银色匕首埋在了河边", notes="改过"))
    assert edited.user_edited and edited.content == "莱姆把银色匕首埋在了河边" and "匕首" in " ".join(edited.keywords)
    api.memories.edit(instance, memory.id, MemoryUpdate(importance=0.95))
    detail = api.memories.show(instance, memory.id)
    assert [(v.version, v.content) for v in detail.versions] == [
        (1, "莱姆把金色怀表藏在旧仓库"),
        (2, "莱姆把银色匕首埋在了河边"),
    ]
    assert detail.versions[1].importance != 0.95 and detail.memory.importance == 0.95
    # the search index and the vector follow the new text
    hits = api.memories.search(instance, "银色匕首埋在哪里").items
    assert hits and hits[0].id == memory.id and "bm25" in hits[0].breakdown["paths"]
    assert not [h for h in api.memories.search(instance, "怀表").items if "bm25" in h.breakdown["paths"]]


def test_pin_unpin_and_a_pinned_memory_is_not_edited(db_url: str, setup: tuple[PersonaLab, int]) -> None:
    api, instance = setup
    memory = api.memories.add(instance, MemoryCreate(content="原来的内容"))
    assert api.memories.pin(instance, memory.id).pinned
    before = snapshot(db_url, instance)
    with pytest.raises(InvalidInput, match=f"memory {memory.id} is pinned"):
        api.memories.edit(instance, memory.id, MemoryUpdate(content="新的内容"))
    assert snapshot(db_url, instance) == before and api.memories.show(instance, memory.id).versions == []
    assert not api.memories.unpin(instance, memory.id).pinned
    assert api.memories.edit(instance, memory.id, MemoryUpdate(content="新的内容")).content == "新的内容"


def test_delete_and_then_edit_is_a_clear_error(db_url: str, setup: tuple[PersonaLab, int]) -> None:
    api, instance = setup
    memory = api.memories.add(instance, MemoryCreate(content="要删掉的"))
    api.memories.edit(instance, memory.id, MemoryUpdate(content="改过再删"))
    api.memories.delete(instance, memory.id)
    assert api.memories.list(instance).total == 0
    for call in (
        lambda: api.memories.edit(instance, memory.id, MemoryUpdate(content="x")),
        lambda: api.memories.delete(instance, memory.id),
        lambda: api.memories.show(instance, memory.id),
        lambda: api.memories.pin(instance, memory.id),
    ):
        with pytest.raises(NotFound, match=f"memory {memory.id} does not exist in instance {instance}"):
            call()


def test_bad_values_name_the_item_and_change_nothing(db_url: str, setup: tuple[PersonaLab, int]) -> None:
    api, instance = setup
    memory = api.memories.add(instance, MemoryCreate(content="和Mary是好朋友"))
    other = _instance(db_url)
    theirs = api.memories.add(other, MemoryCreate(content="别的实例的记忆"))
    before = snapshot(db_url, instance), snapshot(db_url, other)
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: api.memories.add(instance, MemoryCreate(content="   ")), InvalidInput, "memory content is empty"),
        (lambda: api.memories.edit(instance, memory.id, MemoryUpdate(content=" ")), InvalidInput, "content is empty"),
        (lambda: api.memories.edit(instance, memory.id, MemoryUpdate()), InvalidInput, "nothing to change"),
        (
            lambda: api.memories.edit(instance, memory.id, MemoryUpdate(importance=1.5)),
            InvalidInput,
            "importance 1.5",
        ),
        (lambda: api.memories.edit(instance, memory.id, MemoryUpdate(type="dream")), InvalidInput, "'dream'"),
        (lambda: api.memories.add(instance, MemoryCreate(content="x", layer="deep")), InvalidInput, "'deep'"),
        (lambda: api.memories.show(instance, theirs.id), NotFound, f"memory {theirs.id} does not exist in instance"),
        (
            lambda: api.memories.edit(instance, theirs.id, MemoryUpdate(content="偷改")),
            NotFound,
            f"memory {theirs.id}",
        ),
        (lambda: api.memories.delete(instance, theirs.id), NotFound, f"memory {theirs.id}"),
        (lambda: api.memories.list(99999), InstanceNotFound, "instance 99999 does not exist"),
        (lambda: api.memories.show(instance, "7"), InvalidInput, "memory must be an id"),
        (lambda: api.memories.import_(instance, '{"content": "ok"}\n{"content": ""}'), InvalidInput, "line 2"),
        (lambda: api.memories.import_(instance, "not json"), InvalidInput, "line 1"),
    ]
    for call, kind, words in cases:
        with pytest.raises(kind, match=words):
            call()
    assert (snapshot(db_url, instance), snapshot(db_url, other)) == before


def test_another_users_instance_is_not_found(db_url: str, data_dir: Path) -> None:
    mine = _instance(db_url, owner="ana")
    theirs = _instance(db_url, owner="bo")
    memory = PersonaLab(database_url=db_url).memories.add(theirs, MemoryCreate(content="bo的秘密"))
    ana = PersonaLab(owner="ana", database_url=db_url).memories
    with pytest.raises(InstanceNotFound, match=f"instance {theirs} does not exist"):
        ana.list(theirs)
    with pytest.raises(InstanceNotFound, match=f"instance {theirs}"):
        ana.edit(theirs, memory.id, MemoryUpdate(content="改"))
    with pytest.raises(NotFound, match=f"memory {memory.id} does not exist in instance {mine}"):
        ana.show(mine, memory.id)
    assert ana.list(mine).total == 0


def test_export_then_import_round_trips(db_url: str, setup: tuple[PersonaLab, int]) -> None:
    api, instance = setup
    api.memories.add(instance, MemoryCreate(content="和Mary是好朋友", type="relationship", tags=["朋友"]))
    api.memories.add(instance, MemoryCreate(content="想要离开废土", type="goal", pinned=True))
    exported = api.memories.export_json(instance)
    other = _instance(db_url)
    assert api.memories.import_(other, exported).imported == 2
    again = api.memories.list(other).items
    assert [(m.content, m.type, m.pinned, m.tags) for m in again] == [
        ("和Mary是好朋友", "relationship", False, ["朋友"]),
        ("想要离开废土", "goal", True, []),
    ]
    text = api.memories.export(instance)
    assert api.memories.import_(_instance(db_url), text).imported == 2
