"""`personalab trigger-config show|set|reset`: seed 004's trigger configuration as data (issue 23), per scope.

    personalab trigger-config show  [--character ID | --instance ID] [--json]
    personalab trigger-config set   [--character ID | --instance ID] FIELD=VALUE ... [--clear] [--json]
    personalab trigger-config reset [--character ID | --instance ID]

No scope: the global configuration. VALUE is JSON (`true`, `0.5`, `null` unsets the field) or, when it is no
JSON, text (`inject_position=user`, `template=- {content}`); `max_per_type.goal=2` sets one type's maximum.
`show` prints each field in effect and where it comes from (instance, character, global or default). A bad field or
value: one line naming it (`trigger_config.relevance_threshold: …`), exit 2, nothing saved.
"""

from __future__ import annotations

import argparse
from typing import Any

from personalab.graph.api.facade import PersonaLab
from personalab.graph.api.schemas.trigger_config import TriggerConfigPublic
from personalab.graph.cli.args import ID, json_argument
from personalab.graph.cli.output import echo, json_text
from personalab.nodes.rules.errors import InvalidInput


def _scope(args: argparse.Namespace) -> dict[str, int | None]:
    return {"character_id": args.character, "instance_id": args.instance}


def _value(raw: str, field: str) -> Any:
    try:
        return json_argument(raw, f"trigger_config.{field}")
    except InvalidInput:
        return raw  # no JSON: the text itself (a position, a template)


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`FIELD=VALUE` words as changes; `max_per_type.KIND=N` as one type's maximum."""
    changes: dict[str, Any] = {}
    for item in items:
        field, sep, raw = item.partition("=")
        field = field.strip()
        if not sep or not field:
            raise InvalidInput(f"trigger_config: {item!r} is not FIELD=VALUE")
        head, dot, kind = field.partition(".")
        if dot:
            if head != "max_per_type":
                raise InvalidInput(f"trigger_config.{field}: only max_per_type has parts (max_per_type.goal=2)")
            limits = changes.setdefault("max_per_type", {})
            if not isinstance(limits, dict):
                raise InvalidInput("trigger_config.max_per_type: given whole and per type")
            limits[kind] = _value(raw, field)
        else:
            changes[field] = _value(raw, field)
    return changes


def _print(config: TriggerConfigPublic, as_json: bool) -> None:
    if as_json:
        print(json_text(config.model_dump(mode="json"), indent=1))
        return
    echo(f"trigger configuration of {config.scope} (in effect, and where each value comes from):")
    for name, value in config.effective.items():
        if name == "max_per_type":
            for kind, limit in value.items():
                echo(f"  {name}.{kind} = {limit}  ({config.sources.get(f'{name}.{kind}', 'default')})")
            continue
        echo(f"  {name} = {json_text(value, indent=None)}  ({config.sources.get(name, 'default')})")


def _cmd_show(args: argparse.Namespace) -> int:
    _print(PersonaLab().trigger_config.get(**_scope(args)), args.json)
    return 0


def _cmd_set(args: argparse.Namespace) -> int:
    changes = parse_assignments(args.assignments)
    if not changes and not args.clear:
        raise InvalidInput("trigger_config: nothing to set (FIELD=VALUE ...)")
    _print(PersonaLab().trigger_config.set(changes, clear=args.clear, **_scope(args)), args.json)
    return 0


def _cmd_reset(args: argparse.Namespace) -> int:
    config = PersonaLab().trigger_config.reset(**_scope(args))
    echo(f"trigger configuration of {config.scope} reset: the wider scopes' values (or the defaults) apply")
    return 0


def _scope_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--character", type=ID, metavar="ID", help="a character's configuration (all its instances)")
    group.add_argument("--instance", type=ID, metavar="ID", help="an instance's configuration")


def register(sub: Any) -> None:
    group = sub.add_parser("trigger-config", help="seed 004's memory trigger configuration, per scope")
    actions = group.add_subparsers(dest="trigger_config_command", required=True, parser_class=type(group))
    show = actions.add_parser("show", help="the configuration in effect and where each value comes from")
    _scope_options(show)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_cmd_show)
    change = actions.add_parser("set", help="set fields: FIELD=VALUE (JSON or text; null unsets)")
    _scope_options(change)
    change.add_argument("assignments", nargs="*", metavar="FIELD=VALUE")
    change.add_argument("--clear", action="store_true", help="unset every field of the scope first")
    change.add_argument("--json", action="store_true", help="print JSON")
    change.set_defaults(handler=_cmd_set)
    reset = actions.add_parser("reset", help="unset everything set on the scope")
    _scope_options(reset)
    reset.set_defaults(handler=_cmd_reset)
