"""Scenario files of `personalab eval run` (issue 12): JSON or YAML, checked against the shipped JSON Schema
(`evals/scenarios/scenario.schema.json`) and then read into pydantic models, before anything runs.

Every problem is one `InvalidInput` line naming the file, the path inside it (``turns[3].expect.retrieved``)
and what is wrong. A scenario's turns expand (`expand_turns`) into the steps one instance plays: user turns,
filler turns drawn from the built-in pool (`evals.filler`), and probes whose checks are scored.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml  # type: ignore[import-untyped]  # no stubs installed (types-PyYAML is not a dependency)
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError as SchemaError  # type: ignore[import-untyped]
from personalab.evals.filler import filler_lines
from personalab.nodes.rules.errors import InvalidInput
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as ModelError

MAX_FILE_BYTES = 20 * 1024 * 1024
SUFFIXES = (".json", ".yaml", ".yml")
Gap = Literal["none", "minutes", "hours", "days", "long_absence"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Expect(_Model):
    retrieved: tuple[str, ...] = ()
    prompt_lacks: tuple[str, ...] = ()
    reply: tuple[str, ...] = ()
    contradicts: tuple[str, ...] = ()  # issue 30: none may be in the reply
    order: tuple[str, ...] = ()  # issue 26: each in the retrieved region, in this order (the current truth first)
    private: tuple[str, ...] = ()  # issue 26: each in the private block (unspoken knowledge), nowhere else


class Goals(_Model):
    """What `eval run --conditions` must show (issue 30); a missed goal makes the run exit 1."""

    memory_use_gain_points: float | None = None  # full minus recent, percentage points of probes using the fact
    in_character_min_percent: float | None = None
    contradictions_max: int | None = None
    # issue 26 (curated memory), checked in every run: probe checks passed, prompts with an exchange twice,
    # private memories presented as sayable, memories retrieved for someone who did not witness them
    probe_checks_min_percent: float | None = None
    duplicates_max: int | None = None
    private_sayable_max: int | None = None
    unwitnessed_max: int | None = None


class RecallExpect(_Model):
    retrieved: tuple[str, ...] = ()  # each in an item recalled
    lacks: tuple[str, ...] = ()  # none in any item recalled


class RecallStep(_Model):
    """Issue 26: what a script NPC of the scene (or, without `npc`, the character) recalls for `recall` — through the
    API (`memory.recall`) in process, `personalab memory recall --npc` with `--via cli`. Not a turn."""

    recall: str
    npc: str | None = None
    expect: RecallExpect = RecallExpect()
    instance: int | None = Field(None, ge=1)


class ScenarioMemory(_Model):
    """Issue 26: a memory stored in every instance before the first turn (e.g. the character's private thought)."""

    content: str
    type: str = "event"
    importance: float = Field(0.8, ge=0, le=1)


class ScenarioSettings(_Model):
    """Issue 26: settings the scenario's processes play with (environment of the worker and its turns)."""

    consolidation: bool | None = None


class UserTurn(_Model):
    user: str
    lines_before: tuple[str | dict[str, Any], ...] = ()
    choice: Literal["normal", "important", "turning_point", "ending"] | None = None
    gap: Gap | None = None
    session: Literal["new"] | None = None
    instance: int | None = Field(None, ge=1)  # played only in this instance (issue 30)


class FillerTurns(_Model):
    filler: int = Field(ge=1)
    seed: int = 0
    language: Literal["zh", "en"] | None = None


class ProbeTurn(_Model):
    probe: str
    expect: Expect
    lines_before: tuple[str | dict[str, Any], ...] = ()
    gap: Gap | None = None
    session: Literal["new"] | None = None
    instance: int | None = Field(None, ge=1)  # played only in this instance (issue 30)


class Secret(_Model):
    instance: int = Field(ge=1)
    user: str
    phrase: str | None = None

    @property
    def needle(self) -> str:
        return self.phrase or self.user


class Scenario(_Model):
    name: str
    language: Literal["zh", "en"] = "zh"
    description: str = ""
    user_name: str | None = None
    character: dict[str, Any]
    background: dict[str, Any]
    instances: int = Field(1, ge=1)
    worldbook: tuple[dict[str, Any], ...] = ()
    knowledge: tuple[dict[str, Any], ...] = ()
    turns: tuple[UserTurn | FillerTurns | ProbeTurn | RecallStep, ...]
    memories: tuple[ScenarioMemory, ...] = ()
    settings: ScenarioSettings | None = None
    secrets: tuple[Secret, ...] = ()
    goals: Goals | None = None
    source: str = ""  # the file it came from (set by the loader, not in the file)


class Step(_Model):
    """One turn an instance plays: what is sent, and how it is scored."""

    kind: Literal["user", "filler", "probe", "secret", "recall"]
    message: str
    lines_before: tuple[dict[str, Any], ...] = ()
    choice: str | None = None
    gap: Gap | None = None
    session: bool = False
    expect: Expect | None = None
    where: str = ""  # the item of the file it comes from, e.g. turns[4]
    instance: int | None = None  # played only in this instance (1-based); None: in every instance
    npc: str | None = None  # a recall step's NPC (issue 26)
    recall: RecallExpect | None = None


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The shipped JSON Schema of scenario files."""
    text = resources.files("personalab.evals.scenarios").joinpath("scenario.schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def _path(parts: Sequence[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _problem(error: SchemaError, document: Any) -> tuple[str, str]:
    """(path, problem) of the most telling error: for a turn or a line that fits none of its kinds, the error
    of the kind its keys say it is (a turn with "probe" is checked as a probe)."""
    path = list(error.absolute_path)
    if error.validator == "oneOf" and isinstance(error.instance, dict):
        defs = schema()["$defs"]
        kind = next(
            (
                name
                for key, name in (
                    ("user", "userTurn"),
                    ("filler", "fillerTurns"),
                    ("probe", "probeTurn"),
                    ("recall", "recallStep"),
                )
                if key in error.instance
            ),
            None,
        )
        if path and path[0] == "turns":
            if kind is None:
                return _path(path), "a turn needs one of the keys user, filler, probe or recall"
            sub = Draft202012Validator({**defs[kind], "$defs": defs})
            inner = sorted(sub.iter_errors(error.instance), key=lambda e: list(e.absolute_path))
            if inner:
                return _problem_inner(path, inner[0])
        if path and path[0] in ("character", "background"):
            if "sample" in error.instance and len(error.instance) > 1:
                return _path(path), 'a sample stands alone: give {"sample": ...} or the fields, not both'
            branch = error.schema["oneOf"][0 if "sample" in error.instance else 1]
            inner = sorted(
                Draft202012Validator(branch).iter_errors(error.instance), key=lambda e: list(e.absolute_path)
            )
            if inner:
                return _problem_inner(path, inner[0])
    return _path(path), error.message


def _problem_inner(prefix: list[Any], error: SchemaError) -> tuple[str, str]:
    return _path([*prefix, *error.absolute_path]), error.message


def parse_document(document: Any, source: str) -> Scenario:
    """A scenario from its parsed document; `InvalidInput` "source: at path: problem" for the first problem."""
    errors = sorted(
        Draft202012Validator(schema()).iter_errors(document),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        where, problem = _problem(errors[0], document)
        raise InvalidInput(f"{source}: at {where}: {problem}")
    try:
        scenario = Scenario.model_validate({**document, "source": source})
    except ModelError as exc:
        first = exc.errors()[0]
        raise InvalidInput(f"{source}: at {_path(first['loc'])}: {first['msg']}") from None
    for index, secret in enumerate(scenario.secrets):
        if secret.instance > scenario.instances:
            raise InvalidInput(
                f"{source}: at secrets[{index}].instance: instance {secret.instance} but the scenario plays "
                f"{scenario.instances} instance(s)"
            )
        if scenario.instances < 2:
            raise InvalidInput(f"{source}: at secrets[{index}]: secrets need at least 2 instances")
    for index, turn in enumerate(scenario.turns):
        number = getattr(turn, "instance", None)
        if number is not None and number > scenario.instances:
            raise InvalidInput(
                f"{source}: at turns[{index}].instance: instance {number} but the scenario plays "
                f"{scenario.instances} instance(s)"
            )
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file (JSON or YAML by its suffix)."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise InvalidInput(f"{path}: a scenario file ends in .json, .yaml or .yml")
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file" if not path.exists() else f"{path}: not a regular file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InvalidInput(f"{path}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        if path.suffix.lower() == ".json":
            document = json.loads(text)
        else:
            document = yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise InvalidInput(f"{path}: not valid YAML ({where}{getattr(exc, 'problem', None) or exc})") from None
    return parse_document(document, str(path))


def scenario_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files named, a folder standing for its scenario files (sorted); the schema file is no scenario."""
    found: list[Path] = []
    for item in paths:
        path = Path(item)
        if str(item) == "shipped" and not path.exists():
            path = shipped_scenarios_dir()
        elif str(item).startswith("shipped/") and not path.exists():  # shipped/memory: a folder of the package's
            path = shipped_scenarios_dir() / str(item).removeprefix("shipped/")
        if path.is_dir():
            found.extend(
                sorted(
                    p for p in path.iterdir() if p.suffix.lower() in SUFFIXES and not p.name.endswith(".schema.json")
                )
            )
        else:
            found.append(path)
    if not found:
        raise InvalidInput(f"no scenario files in {', '.join(map(str, paths))}")
    return found


def load_scenarios(paths: Sequence[str | Path]) -> list[Scenario]:
    """Every scenario, all validated before any runs; names must be unique."""
    scenarios = [load_scenario(path) for path in scenario_files(paths)]
    seen: dict[str, str] = {}
    for scenario in scenarios:
        if scenario.name in seen:
            raise InvalidInput(
                f"{scenario.source}: at name: {scenario.name!r} is also the name of {seen[scenario.name]}"
            )
        seen[scenario.name] = scenario.source
    return scenarios


def shipped_scenarios_dir() -> Path:
    """The folder of the scenarios shipped in the package."""
    return Path(str(resources.files("personalab.evals.scenarios")))


def host_line(line: str | dict[str, Any]) -> dict[str, Any]:
    """A scenario's host line as the graph takes it: a plain string is narration."""
    if isinstance(line, str):
        return {"attribute": "assistant", "content": line, "display_name": "旁白"}
    return {"attribute": "assistant", **line}


def expand_turns(scenario: Scenario) -> list[Step]:
    """The steps every instance plays, in order (secrets are added per instance by the runner)."""
    steps: list[Step] = []
    for index, item in enumerate(scenario.turns):
        where = f"turns[{index}]"
        if isinstance(item, FillerTurns):
            for text in filler_lines(item.filler, item.seed, item.language or scenario.language):
                steps.append(Step(kind="filler", message=text, where=where))
        elif isinstance(item, RecallStep):
            steps.append(
                Step(
                    kind="recall",
                    message=item.recall,
                    npc=item.npc,
                    recall=item.expect,
                    where=where,
                    instance=item.instance,
                )
            )
        elif isinstance(item, ProbeTurn):
            steps.append(
                Step(
                    kind="probe",
                    message=item.probe,
                    lines_before=tuple(host_line(line) for line in item.lines_before),
                    gap=item.gap or ("days" if item.session else None),
                    session=item.session is not None,
                    expect=item.expect,
                    where=where,
                    instance=item.instance,
                )
            )
        else:
            steps.append(
                Step(
                    kind="user",
                    message=item.user,
                    lines_before=tuple(host_line(line) for line in item.lines_before),
                    choice=item.choice,
                    gap=item.gap or ("days" if item.session else None),
                    session=item.session is not None,
                    where=where,
                    instance=item.instance,
                )
            )
    return steps
