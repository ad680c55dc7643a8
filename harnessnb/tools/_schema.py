"""A tool's JSON schema: derived from a typed signature and its docstring, and checked.

``schema_from_signature`` turns type hints into a schema (str, int, float, bool,
list[...], dict, Optional, Literal, Enum, and ``Annotated[T, {...}]`` whose mapping
adds keywords such as ``pattern`` or ``minimum``); ``parse_docstring`` reads a
Google-style summary and ``Args:`` section; ``validate_args`` checks a call's
arguments with a real JSON Schema validator (``jsonschema``).

The docstring parser is our own ~40 lines rather than ``docstring-parser``: it needs
only the summary and the ``Args:`` entries, and a runtime dependency for that would
cost more (install, import time) than it saves.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from ..rules._errors import ConfigError
from ..rules._text import shorten

__all__ = [
    "check_schema",
    "object_schema",
    "parse_docstring",
    "schema_from_signature",
    "validate_args",
]


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?)\s*:\s*$"
)
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (text before the first section) and the ``Args:`` entries."""
    lines = doc.splitlines()
    summary: list[str] = []
    i = 0
    while i < len(lines) and not _SECTION.match(lines[i].strip()):
        summary.append(lines[i].rstrip())
        i += 1
    args: dict[str, str] = {}
    while i < len(lines):
        header = _SECTION.match(lines[i].strip())
        i += 1
        if header and header.group(1) in ("Args", "Arguments", "Parameters"):
            i = _parse_args_section(lines, i, args)
    return "\n".join(summary).strip(), args


def _parse_args_section(lines: list[str], i: int, out: dict[str, str]) -> int:
    base: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        if base is None:
            base = indent
        if indent < base or (indent == base and _SECTION.match(line.strip())):
            break
        match = _ARG_LINE.match(line.strip()) if indent == base else None
        if match:
            current = match.group(1).lstrip("*")
            out[current] = match.group(2).strip()
        elif current is not None:
            out[current] = f"{out[current]} {line.strip()}".strip()
        i += 1
    return i


def schema_from_signature(
    fn: Callable[..., Any], arg_docs: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], bool]:
    """The JSON schema of ``fn``'s parameters, and whether it takes ``idempotency_key``."""
    arg_docs = arg_docs or {}
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # unresolvable forward references: say which function
        raise ConfigError(f"cannot read the type hints of {fn.__name__}: {exc}") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    wants_key = False
    for param in inspect.signature(fn).parameters.values():
        if param.name == "idempotency_key":
            wants_key = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigError(f"tool {fn.__name__}: parameter {param.name} must be named")
        prop = _schema_for(hints.get(param.name, Any), f"{fn.__name__}.{param.name}")
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif _jsonable(param.default):
            prop["default"] = param.default
        properties[param.name] = prop
    schema = object_schema(properties, required)
    check_schema(schema, f"tool {fn.__name__}")  # an Annotated mapping may be wrong
    return schema, wants_key


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The parameters of a tool: an object of exactly ``properties``."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(tp: Any, where: str) -> dict[str, Any]:
    """One type hint as a JSON schema fragment."""
    # Annotated[int, {"minimum": 1}]: the mapping joins the schema. First, because a
    # dict in the metadata makes the hint unhashable (no ``in _SCALARS``).
    if get_origin(tp) is Annotated:
        base, *extras = get_args(tp)
        schema = _schema_for(base, where)
        for extra in extras:
            if isinstance(extra, Mapping):
                schema.update(extra)
        return schema
    if tp is Any:
        return {}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if tp is type(None):
        return {"type": "null"}
    origin, targs = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return _union_schema(targs, where)
    if origin is Literal:
        return _enum_schema(list(targs))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([m.value for m in tp])
    if tp in (list, tuple, set) or origin in (list, tuple, set, Sequence):
        items = _schema_for(targs[0], where) if targs and targs[0] is not Ellipsis else {}
        return {"type": "array", "items": items} if items else {"type": "array"}
    if tp is dict or origin in (dict, Mapping):
        return {"type": "object"}
    raise ConfigError(f"tool parameter {where}: unsupported type {tp!r}")


def _union_schema(targs: tuple[Any, ...], where: str) -> dict[str, Any]:
    options = [_schema_for(a, where) for a in targs if a is not type(None)]
    nullable = len(options) < len(targs)
    if nullable:
        options.append({"type": "null"})
    return options[0] if len(options) == 1 else {"anyOf": options}


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"enum": values}
    kinds = {_SCALARS.get(type(v)) for v in values}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    return schema


# ------------------------------------------------------------------ validation

# jsonschema rather than fastjsonschema: its errors are structured (keyword, path,
# instance), so every problem is reported in words the model can act on, all at once;
# fastjsonschema stops at the first and its messages are fixed. Arguments are small
# and a call is rare, so compiling for speed buys nothing here.


# Schemas already found valid: checking against the metaschema costs about a
# millisecond per tool, and every run builds an executor. A tool keeps its schema
# object from run to run (the built-in ones are class attributes), so the object
# itself is the cheap key (kept here, so its id cannot be reused); an equal schema in
# a new object is found by its canonical JSON.
_VALID: set[str] = set()
_VALID_OBJECTS: dict[int, Mapping[str, Any]] = {}


def check_schema(schema: Mapping[str, Any], where: str) -> None:
    """Raise ``ConfigError`` unless ``schema`` is a valid JSON Schema (a tool's parameters)."""
    from jsonschema.exceptions import SchemaError

    if _VALID_OBJECTS.get(id(schema)) is schema:
        return
    key = json.dumps(schema, sort_keys=True, default=repr)
    if key in _VALID:
        _remember(schema)
        return
    try:
        _validator_class(schema).check_schema(schema)
    except SchemaError as exc:
        message = f"{where}: the parameters are not a valid JSON Schema: {exc.message}"
        raise ConfigError(message) from exc
    _VALID.add(key)
    _remember(schema)


def _remember(schema: Mapping[str, Any]) -> None:
    if len(_VALID_OBJECTS) >= 1024:  # tools built anew for every run: keep memory flat
        _VALID_OBJECTS.clear()
    _VALID_OBJECTS[id(schema)] = schema


def validate_args(schema: Mapping[str, Any], args: Any) -> list[str]:
    """Problems found checking ``args`` against ``schema`` (empty when valid).

    Every JSON Schema keyword is enforced (``pattern``, ``minimum``, ``enum``,
    ``minItems``...), by the draft the schema names in ``$schema``, else 2020-12;
    ``format`` is an annotation only, as the standard says by default. Regular
    expressions are Python's (``re.search``).
    """
    from jsonschema.exceptions import SchemaError, UnknownType

    validator = _validator(schema)
    problems: list[str] = []
    try:
        for error in validator.iter_errors(args):
            for problem in _describe(error):
                if problem not in problems:
                    problems.append(problem)
    except (SchemaError, UnknownType) as exc:  # a hand-written schema the check missed
        problems.append(f"the tool's schema cannot be applied: {exc}")
    return problems


# A validator per schema object (as ``_VALID_OBJECTS``: the object is the key and is
# kept, so its id cannot be reused): building one costs more than most checks.
_VALIDATORS: dict[int, tuple[Mapping[str, Any], Any]] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    kept = _VALIDATORS.get(id(schema))
    if kept is not None and kept[0] is schema:
        return kept[1]
    validator = _validator_class(schema)(schema)
    if len(_VALIDATORS) >= 1024:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator


def _validator_class(schema: Mapping[str, Any]) -> Any:
    from jsonschema.validators import Draft202012Validator, validator_for

    return validator_for(schema, default=Draft202012Validator)


def _describe(error: Any) -> list[str]:
    """One jsonschema error in the words the model sees (``where: what``)."""
    where = _where(error.absolute_path)
    value, expected, keyword = error.instance, error.validator_value, error.validator
    if keyword == "required":
        missing = [n for n in expected if isinstance(value, dict) and n not in value]
        return [f"{where}: missing required {name!r}" for name in missing]
    if keyword == "additionalProperties" and isinstance(value, dict):
        props = error.schema.get("properties", {})
        patterns = error.schema.get("patternProperties", {})
        allowed = ", ".join(props) or "none"
        extra = [n for n in value if n not in props and not any(re.search(p, n) for p in patterns)]
        return [f"{where}: unexpected {name!r} (allowed: {allowed})" for name in extra]
    if keyword == "type":
        names = [expected] if isinstance(expected, str) else list(expected)
        return [f"{where}: expected {' or '.join(names)}, got {_json_type(value)}"]
    if keyword == "enum":
        return [f"{where}: {_short(value)} is not one of {expected}"]
    if keyword in ("anyOf", "oneOf"):
        return [f"{where}: {_short(value)} matches none of the allowed forms"]
    if keyword == "minItems":
        return [f"{where}: needs at least {expected} item(s)"]
    if keyword == "pattern":
        return [f"{where}: {_short(value)} does not match the pattern {expected!r}"]
    if keyword in ("minLength", "maxLength"):
        bound = "at least" if keyword == "minLength" else "at most"
        return [f"{where}: must be {bound} {expected} character(s), got {len(value)}"]
    # minimum, maximum, multipleOf, const, uniqueItems...: jsonschema's own words,
    # with the offending value shortened (it may be a whole file's content).
    return [f"{where}: {error.message.replace(repr(value), _short(value))}"]


def _where(path: Sequence[str | int]) -> str:
    """``arguments`` for the whole object, a property's name, ``name[i]`` for an item."""
    where = "arguments"
    for part in path:
        where = f"{where}[{part}]" if isinstance(part, int) else str(part)
    return where


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    for kind, name in ((float, "number"), (str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _short(value: Any) -> str:
    return shorten(repr(value), 60)
