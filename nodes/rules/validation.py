"""Domain entries as pydantic v2 models, and their errors in the project's words (LAYOUT example 4).

`Entry` is the base of the seeds' entries (seed 001 常识知识库, seed 004 世界书): frozen, an unknown field is an
error, and one `model_validate` reads rows (by attribute) and files or calls (by key) alike (`Entry.parse`).
A pydantic `ValidationError` becomes one `InvalidInput` line naming the entry and the field path
(`describe`): ``entry 3 (uid 12): field 'key' must be a list of strings, got string``: what the CLI prints,
the same wording for a typed-in entry and the 300th of an imported file.

The field types take JSON's kinds as they are, never guessing: `Text` is no number, `Flag` no "yes", `Number`
neither text nor true/false, `Whole` a number without a fraction (7.0 is 7).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Self, TypeVar

import annotated_types
from personalab.nodes.rules.errors import InvalidInput
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError


def json_type(value: object) -> str:
    """The JSON name of a value's kind, for messages ("got string")."""
    return {
        dict: "object",
        list: "list",
        tuple: "list",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate: no text, not even writable as UTF-8


def has_surrogate(text: str) -> bool:
    """Whether `text` holds a lone surrogate (JSON's "\\ud800", or bytes that were not UTF-8 on the command line):
    no database stores it and no terminal can be sent it."""
    return _SURROGATE.search(text) is not None


def bad_character(text: str) -> str | None:
    """What makes `text` unstorable text, or None: a NUL character (PostgreSQL refuses it in text) or a lone
    surrogate."""
    if "\x00" in text:
        return "a NUL character"
    if has_surrogate(text):
        return "a lone surrogate (not text)"
    return None


def _whole(value: Any) -> Any:
    # pydantic's lax int would take "7" and True; its strict int would refuse 7.0
    if isinstance(value, bool | str | bytes):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def _entry_id(value: Any) -> Any:
    # rows number their entries, the rules name them: an id is text
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


M = TypeVar("M", bound=BaseModel)

Text = Annotated[str, Strict()]
Flag = Annotated[bool, Strict()]
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
Whole = Annotated[int, BeforeValidator(_whole)]
EntryId = Annotated[str, BeforeValidator(_entry_id), Strict()]


class Entry(BaseModel):
    """Base of the seeds' entries: frozen, unknown fields refused, rows read by attribute.

    Constructed in code with keyword arguments or with the leading fields positionally in their declared
    order (as the dataclasses these models replaced were); a bad value raises `InvalidInput` naming `label`
    and the field. `parse` validates a mapping or a row and names `where` instead."""

    model_config = ConfigDict(frozen=True, extra="forbid", from_attributes=True)
    label: ClassVar[str] = "entry"

    def __init__(self, /, *args: Any, **data: Any) -> None:
        if args:
            names = list(type(self).model_fields)
            if len(args) > len(names):
                raise TypeError(f"{type(self).__name__}() takes at most {len(names)} positional arguments")
            for name, value in zip(names, args, strict=False):
                if name in data:
                    raise TypeError(f"{type(self).__name__}() got multiple values for {name!r}")
                data[name] = value
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidInput(f"{type(self).label}: {describe(exc, type(self))}") from None

    # Validation (`model_validate`, a nested entry) goes straight to pydantic, not through this constructor:
    # the marker pydantic's own RootModel sets on its `__init__`.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def parse(cls, data: Any, where: str) -> Self:
        """`data` (a mapping or a row) as this entry; `InvalidInput` naming `where` and the field."""
        return validated(cls, data, where)


def check_storable(entry: BaseModel, where: str) -> None:
    """`InvalidInput` naming `where` and the field when a text of `entry` (a field, or an item of a list field)
    holds a NUL character, which PostgreSQL refuses in text (issue 14: a typed-in entry is held to what an imported
    file is). Lone surrogates are refused by pydantic's own string validation. Called where entries are written, not
    where stored rows are read back (a turn reads thousands)."""
    for name, value in entry.__dict__.items():
        for text in value if isinstance(value, tuple | list) else (value,):
            if type(text) is str and "\x00" in text:
                raise InvalidInput(f"{where}: field '{name}' contains a NUL character")


def validated(model: type[M], data: Any, where: str, error: type[InvalidInput] = InvalidInput) -> M:
    """`model.model_validate(data)`; a `ValidationError` becomes `error` naming `where` and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(f"{where}: {describe(exc, model)}") from None


# --------------------------------------------------------------------------------------------------
# ValidationError → one line


def describe(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """The first problem of `exc` in words, field path first: unknown fields before missing ones before
    bad values (an unknown field is most often a misspelt one, which then also looks missing)."""
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        parent = unknown[0]["loc"][:-1]
        names = sorted(str(e["loc"][-1]) for e in unknown if e["loc"][:-1] == parent)
        if not parent:
            return f"unknown field(s) {', '.join(names)}"
        return f"field '{_path(parent)}': unknown key(s) {', '.join(names)}"
    missing = [e for e in errors if e["type"] == "missing"]
    if missing:
        return f"missing field '{_path(missing[0]['loc'])}'"
    return _phrase(errors[0], model)


def _path(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc if isinstance(part, str))


def _nouns(path: str) -> tuple[str, str]:
    """(one, many) of what a list field holds: 'keyword(s)' for `secondary_keywords`, else 'item(s)'."""
    last = path.rsplit(".", 1)[-1].rsplit("_", 1)[-1]
    return (last[:-1], last) if last.endswith("s") and len(last) > 1 else ("item", "items")


_KINDS = {
    "bool_type": "must be true or false, got {got}",
    "float_type": "must be a number, got {got}",
    "float_parsing": "must be a number, got {got}",
    "int_type": "must be a whole number, got {got}",
    "int_parsing": "must be a whole number, got {got}",
    "int_from_float": "must be a whole number, got {value}",
    "finite_number": "must be a finite number, got {value}",
    "tuple_type": "must be a list of strings, got {got}",
    "list_type": "must be a list of strings, got {got}",
    "model_type": "must be an object, got {got}",
    "model_attributes_type": "must be an object, got {got}",
    "dict_type": "must be an object, got {got}",
    "string_too_short": "is empty",
    "literal_error": "is {value}; expected {expected}",
}


def _phrase(error: ErrorDetails, model: type[BaseModel] | None) -> str:
    loc, kind, value = error["loc"], error["type"], error.get("input")
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    path = _path(loc)
    item = bool(loc) and isinstance(loc[-1], int)  # a list's element
    one, many = _nouns(path)
    if kind in ("value_error", "assertion_error"):
        text = str(ctx.get("error", error["msg"]))
        return f"field '{path}': {text}" if path else text
    if kind == "string_type":
        text = (
            f"must be a list of strings, has a {json_type(value)}"
            if item
            else f"must be a string, got {json_type(value)}"
        )
    elif kind == "string_too_long":
        limit = ctx.get("max_length")
        size = len(value.strip()) if isinstance(value, str) else "more"
        text = f"has a {one} over {limit} characters" if item else f"has {size} characters, over the limit of {limit}"
    elif kind == "too_long":
        text = f"has {ctx.get('actual_length')} {many}, over the limit of {ctx.get('max_length')}"
    elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        text = _range(model, loc, value)
    elif kind in _KINDS:
        text = _KINDS[kind].format(got=json_type(value), value=repr(value), **ctx)
    else:
        text = error["msg"]
    return f"field '{path}' {text}" if path else text


def _range(model: type[BaseModel] | None, loc: Sequence[int | str], value: Any) -> str:
    """'must be between 0 and 1' when the field has both bounds, else the one it has."""
    low, high = _bounds(model, loc)
    if low is not None and high is not None:
        return f"must be between {low:g} and {high:g}, got {value!r}"
    if low is not None:
        return f"must be a finite number >= {low:g}, got {value!r}"
    return f"must be a number <= {high:g}, got {value!r}"


def _bounds(model: type[BaseModel] | None, loc: Sequence[int | str]) -> tuple[float | None, float | None]:
    low: float | None = None
    high: float | None = None
    names = [part for part in loc if isinstance(part, str)]
    for depth, name in enumerate(names):
        field = model.model_fields.get(name) if model is not None else None
        if field is None:
            break
        if depth == len(names) - 1:
            for rule in field.metadata:
                if isinstance(rule, annotated_types.Ge | annotated_types.Gt):
                    low = float(getattr(rule, "ge", getattr(rule, "gt", math.nan)))
                if isinstance(rule, annotated_types.Le | annotated_types.Lt):
                    high = float(getattr(rule, "le", getattr(rule, "lt", math.nan)))
        annotation = field.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return low, high
