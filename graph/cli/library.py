"""`personalab character|background|instance …`: the library of seed 002 (角色管理, 背景管理, 会话实例管理) on the
command line, a thin layer over the API (`PersonaLab(...).characters|backgrounds|instances`). Every command takes `--json` (one JSON value on
stdout); bad input is one line on stderr and exit code 2 (graph/cli/__init__.py)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from personalab.graph.api.schemas import library as api
from personalab.graph.api.support import read_file, read_json, write_file
from personalab.graph.cli.args import ID, lab
from personalab.graph.cli.locks import add_unlock_parser
from personalab.graph.cli.output import echo, json_text
from personalab.nodes.rules.errors import InvalidInput
from pydantic import BaseModel


def cmd_instance_persona(args: argparse.Namespace) -> int:
    from personalab.graph.cli.personas import cmd_instance_persona as run

    return run(args)


def add_instance_persona_parser(actions: argparse._SubParsersAction) -> None:
    from personalab.graph.cli.personas import add_instance_persona_parser as add

    add(actions)


MAX_FIELDS_FILE = 20 * 1024 * 1024

# (option, field, help) of the character's text fields
CHARACTER_TEXT = (
    ("--description", "description", "what the character is (prompt head)"),
    ("--persona", "persona", "initial persona as free text (prompt head)"),
    ("--traits", "traits", "personality traits, separated by commas or 、 (seed the core memory)"),
    ("--backstory", "backstory", "backstory (seeds the core memory's identity)"),
    ("--motives", "motives", "core motives, separated by commas or lines (seed the core memory's goals)"),
    ("--example-dialogue", "example_dialogue", "example dialogue (prompt middle)"),
    ("--system-prompt", "system_prompt", "the character's own system prompt (prompt head)"),
    ("--post-history", "post_history_instructions", "instructions after the dialogue (prompt tail)"),
)


def _print(value: Any, as_json: bool, lines: Sequence[str]) -> int:
    if as_json:
        data = [item.model_dump(mode="json") for item in value] if isinstance(value, list) else value
        if isinstance(data, BaseModel):
            data = data.model_dump(mode="json")
        print(json_text(data, indent=1))
    else:
        for line in lines:
            echo(line)
    return 0


def _fields_file(path: str | None) -> dict[str, Any]:
    """The fields of `--from FILE` (a JSON object), for long texts."""
    if path is None:
        return {}
    value = read_json(path, MAX_FIELDS_FILE, what="fields file")
    if not isinstance(value, dict):
        raise InvalidInput(f"{path}: expected a JSON object of fields")
    return value


def _character_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields = _fields_file(args.file)
    if args.name is not None:
        fields["name"] = args.name
    for _option, field, _help in CHARACTER_TEXT:
        if getattr(args, field) is not None:
            fields[field] = getattr(args, field)
    if args.greeting is not None:
        fields["greetings"] = list(args.greeting)
    if args.avatar is not None:
        fields["avatar"] = read_file(args.avatar, api.MAX_AVATAR_BYTES, what="avatar")
    return fields


def _character_lines(item: api.Character) -> list[str]:
    avatar = f"{item.avatar_mime}, {item.avatar_bytes} bytes" if item.avatar_bytes else "none"
    rows = [f"character {item.id}: {item.name}", f"  avatar: {avatar}"]
    for _option, field, _help in CHARACTER_TEXT:
        value = getattr(item, field)
        if value:
            rows.append(f"  {field}: {value}")
    rows.extend(f"  greeting {n}: {text}" for n, text in enumerate(item.greetings))
    rows.append(f"  instances: {', '.join(map(str, item.instances)) or 'none'}")
    return rows


def _cmd_character(args: argparse.Namespace) -> int:
    characters = lab(args).characters
    if args.action == "create":
        item = characters.create(_character_fields(args))
        return _print(item, args.json, [str(item.id)])
    if args.action == "list":
        items = characters.list()
        return _print(items, args.json, [f"{c.id:>4}  {c.name}  ({len(c.instances)} instance(s))" for c in items])
    if args.action == "show":
        item = characters.get(args.id)
        return _print(item, args.json, _character_lines(item))
    if args.action == "edit":
        changes = _character_fields(args)
        if args.remove_avatar:
            changes["remove_avatar"] = True
        item = characters.edit(args.id, changes)
        return _print(item, args.json, _character_lines(item))
    if args.action == "avatar":
        data, _mime = characters.avatar(args.id)
        write_file(args.file, data, overwrite=args.overwrite)
        return _print({"id": args.id, "file": args.file, "bytes": len(data)}, args.json, [args.file])
    deleted = characters.delete(args.id, cascade=args.cascade)
    return _print(deleted, args.json, [_deleted_line(deleted)])


def _deleted_line(deleted: api.Deleted) -> str:
    extra = f" and instance(s) {', '.join(map(str, deleted.instances_deleted))}" if deleted.instances_deleted else ""
    return f"deleted {deleted.kind} {deleted.id}{extra}"


def _outline(args: argparse.Namespace) -> list[str] | None:
    if args.outline_file is not None:
        raw = read_file(args.outline_file, MAX_FIELDS_FILE, what="outline file")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidInput(f"{args.outline_file} is not UTF-8 text") from None
        return [line.strip() for line in text.splitlines() if line.strip()]
    return list(args.outline) if args.outline is not None else None


def _background_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields = _fields_file(args.file)
    for field in ("name", "world_setting"):
        if getattr(args, field) is not None:
            fields[field] = getattr(args, field)
    outline = _outline(args)
    if outline is not None:
        fields["outline"] = outline
    return fields


def _background_lines(item: api.BackgroundOut) -> list[str]:
    rows = [f"background {item.id}: {item.name}"]
    if item.world_setting:
        rows.append(f"  world setting: {item.world_setting}")
    rows.extend(f"  {n}. {point}" for n, point in enumerate(item.outline, start=1))
    rows.append(f"  instances: {', '.join(map(str, item.instances)) or 'none'}")
    return rows


def _cmd_background(args: argparse.Namespace) -> int:
    backgrounds = lab(args).backgrounds
    if args.action == "create":
        item = backgrounds.create(_background_fields(args))
        return _print(item, args.json, [str(item.id)])
    if args.action == "list":
        items = backgrounds.list()
        return _print(
            items,
            args.json,
            [f"{b.id:>4}  {b.name}  ({len(b.outline)} points, {len(b.instances)} instance(s))" for b in items],
        )
    if args.action == "show":
        item = backgrounds.get(args.id)
        return _print(item, args.json, _background_lines(item))
    if args.action == "edit":
        changes = _background_fields(args)
        if args.apply_to_instances:
            changes["apply_to_instances"] = True
        item = backgrounds.edit(args.id, changes)
        return _print(item, args.json, _background_lines(item))
    deleted = backgrounds.delete(args.id, cascade=args.cascade)
    return _print(deleted, args.json, [_deleted_line(deleted)])


def _instance_line(item: api.Instance) -> str:
    plot = (
        f"{item.plot.completed}/{item.plot.total} done, at {item.plot.current_index}. {item.plot.current}"
        if item.plot
        else "-"
    )
    last = item.last_turn_at.isoformat(timespec="seconds") if item.last_turn_at else "never"
    return (
        f"{item.id:>4}  {item.title}  | character {item.character_id} {item.character_name or '-'}"
        f" | background {item.background_id} {item.background_name or '-'}"
        f" | created {item.created_at.isoformat(timespec='seconds')} | last turn {last}"
        f" | {item.turns} turn(s) | plot {plot}"
    )


def _cmd_instance(args: argparse.Namespace) -> int:
    instances = lab(args).instances
    if args.action == "create":
        if args.sample:
            if args.character is not None or args.background is not None:
                raise InvalidInput("instance create: --sample makes its own character and background")
            item = instances.create_sample()
        else:
            if args.character is None:
                raise InvalidInput(
                    "instance create: give --character ID (and --background ID, or none: the card's "
                    "scenario), or --sample"
                )
            data = {"character_id": args.character, "background_id": args.background, "greeting": args.greeting}
            if args.title is not None:
                data["title"] = args.title
            if args.persona is not None:
                data["persona_id"] = args.persona
            if args.language is not None:
                data["language"] = args.language
            item = instances.create(data)
        return _print(item, args.json, [str(item.id)])
    if args.action == "list":
        items = instances.list(character_id=args.character, background_id=args.background)
        return _print(items, args.json, [_instance_line(item) for item in items])
    if args.action == "show":
        item = instances.get(args.id)
        return _print(item, args.json, [_instance_line(item)])
    if args.action == "rename":
        item = instances.rename(args.id, args.title)
        return _print(item, args.json, [_instance_line(item)])
    if args.action == "persona":
        return cmd_instance_persona(args)
    if args.action == "language":  # issue 28
        item = instances.set_language(args.id, args.language)
        return _print(item, args.json, [_instance_line(item)])
    if args.action == "delete":
        deleted = instances.delete(args.id)
        return _print(deleted, args.json, [_deleted_line(deleted)])
    if args.action == "export":
        if args.file == "-":
            print(json_text(instances.export_data(args.id), indent=1))
            return 0
        path = instances.export(args.id, args.file, overwrite=args.overwrite)
        return _print({"id": args.id, "file": str(path)}, args.json, [str(path)])
    result = instances.import_file(args.file)
    return _print(result, args.json, [str(result.instance.id)])


def _owner_option(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--owner",
        metavar="USER",
        help="only what the served API shows USER (their own, plus shared characters and "
        "backgrounds; issue 14). Default: everything (the CLI is the operator)",
    )
    return parser


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def _character_options(parser: argparse.ArgumentParser, *, create: bool) -> None:
    parser.add_argument("--name", required=False, help="the character's name" + (" (required)" if create else ""))
    for option, field, help_ in CHARACTER_TEXT:
        parser.add_argument(option, dest=field, help=help_)
    parser.add_argument("--greeting", action="append", help="an opening line (repeat for several; replaces all)")
    parser.add_argument("--avatar", help="an image file (PNG, JPEG, GIF, WebP…)")
    parser.add_argument("--from", dest="file", help="a JSON object of fields (for long texts)")
    _json_flag(parser)


def _background_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name")
    parser.add_argument("--world-setting", dest="world_setting", help="the world setting text (prompt middle)")
    parser.add_argument("--outline", action="append", help="an outline point (repeat, in order; 1–50)")
    parser.add_argument("--outline-file", dest="outline_file", help="a text file, one outline point per line")
    parser.add_argument("--from", dest="file", help="a JSON object of fields")
    _json_flag(parser)


def register(sub: argparse._SubParsersAction) -> None:
    character = sub.add_parser("character", help="characters: create, list, show, edit, delete (seed 002 角色)")
    actions = character.add_subparsers(dest="action", required=True, parser_class=type(character))
    _character_options(actions.add_parser("create", help="store a new character, print its id"), create=True)
    _json_flag(_owner_option(actions.add_parser("list", help="every character")))
    show = actions.add_parser("show", help="one character's fields")
    show.add_argument("id", type=ID)
    _json_flag(show)
    edit = actions.add_parser("edit", help="change the fields given")
    edit.add_argument("id", type=ID)
    _character_options(edit, create=False)
    edit.add_argument("--remove-avatar", action="store_true")
    avatar = actions.add_parser("avatar", help="write the character's avatar image to a file")
    avatar.add_argument("id", type=ID)
    avatar.add_argument("file")
    avatar.add_argument("--overwrite", action="store_true")
    _json_flag(avatar)
    delete = actions.add_parser("delete", help="delete a character (refused while instances use it)")
    delete.add_argument("id", type=ID)
    delete.add_argument("--cascade", action="store_true", help="delete the instances that use it too")
    _json_flag(delete)
    character.set_defaults(handler=_cmd_character)

    background = sub.add_parser("background", help="backgrounds: create, list, show, edit, delete (seed 002 背景)")
    actions = background.add_subparsers(dest="action", required=True, parser_class=type(background))
    _background_options(actions.add_parser("create", help="store a new background, print its id"))
    _json_flag(_owner_option(actions.add_parser("list", help="every background")))
    show = actions.add_parser("show", help="one background with its outline")
    show.add_argument("id", type=ID)
    _json_flag(show)
    edit = actions.add_parser("edit", help="change the fields given; running instances keep their plot")
    edit.add_argument("id", type=ID)
    _background_options(edit)
    edit.add_argument(
        "--apply-to-instances", action="store_true", help="give running instances the new outline (statuses by index)"
    )
    delete = actions.add_parser("delete", help="delete a background (refused while instances use it)")
    delete.add_argument("id", type=ID)
    delete.add_argument("--cascade", action="store_true", help="delete the instances that use it too")
    _json_flag(delete)
    background.set_defaults(handler=_cmd_background)

    instance = sub.add_parser("instance", help="conversation instances (seed 002 会话实例)")
    actions = instance.add_subparsers(dest="action", required=True, parser_class=type(instance))
    create = actions.add_parser("create", help="a new instance of a character in a background; prints its id")
    create.add_argument("--character", type=ID)
    create.add_argument(
        "--background", type=ID, help="the background (none: one made from the character's card scenario, open)"
    )
    create.add_argument("--language", help="the prompt's scaffolding language: zh or en (default: the card's)")
    create.add_argument("--title")
    create.add_argument("--greeting", type=ID, default=0, help="which greeting opens it (0: the first)")
    create.add_argument("--sample", action="store_true", help="the shipped sample character and background")
    create.add_argument("--persona", type=ID, help="the user persona it plays with (persona list)")
    _json_flag(create)
    listing = actions.add_parser("list", help="instances with character, background, times, turns, plot")
    listing.add_argument("--character", type=ID)
    listing.add_argument("--background", type=ID)
    _json_flag(_owner_option(listing))
    show = actions.add_parser("show", help="one instance")
    show.add_argument("id", type=ID)
    _json_flag(show)
    language = actions.add_parser("language", help="the prompt's scaffolding language of an instance: zh or en")
    language.add_argument("id", type=ID)
    language.add_argument("language")
    _json_flag(language)
    rename = actions.add_parser("rename", help="give an instance a new title")
    rename.add_argument("id", type=ID)
    rename.add_argument("title")
    _json_flag(rename)
    delete = actions.add_parser("delete", help="delete an instance and everything of it")
    delete.add_argument("id", type=ID)
    _json_flag(delete)
    export = actions.add_parser("export", help="write an instance to one JSON file (- for stdout)")
    export.add_argument("id", type=ID)
    export.add_argument("file")
    export.add_argument("--overwrite", action="store_true")
    _json_flag(export)
    imported = actions.add_parser("import", help="a new instance from an exported file; prints its id")
    imported.add_argument("file")
    _json_flag(imported)
    add_instance_persona_parser(actions)
    add_unlock_parser(actions)
    instance.set_defaults(handler=_cmd_instance)
