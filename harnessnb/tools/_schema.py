"""A tool's JSON schema: derived from a typed signature and its docstring, and checked.

``schema_from_signature`` turns type hints into a schema (str, int, float, bool,
list[...], dict, Optional, Literal, Enum); ``parse_docstring`` reads a Google-style
summary and ``Args:`` section; ``validate_args`` checks a call's arguments.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin

from ..rules._errors import ConfigError

__all__ = ["parse_docstring", "schema_from_signature", "validate_args"]


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
        hints = typing.get_type_hints(fn)
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
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return schema, wants_key


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(tp: Any, where: str) -> dict[str, Any]:
    """One type hint as a JSON schema fragment."""
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


def validate_args(schema: Mapping[str, Any], args: Any) -> list[str]:
    """Problems found checking ``args`` against ``schema`` (empty when valid).

    Covers the subset tools use: type (one or a list), properties, required,
    additionalProperties, items, enum, anyOf, minItems.
    """
    problems: list[str] = []
    _check(schema, args, "arguments", problems)
    return problems


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _check(schema: Mapping[str, Any], value: Any, where: str, problems: list[str]) -> None:
    if "anyOf" in schema:
        if not any(not validate_args(option, value) for option in schema["anyOf"]):
            problems.append(f"{where}: {_short(value)} matches none of the allowed forms")
        return
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_TYPE_CHECKS.get(n, lambda v: True)(value) for n in names):
            problems.append(f"{where}: expected {' or '.join(names)}, got {_json_type(value)}")
            return
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {_short(value)} is not one of {schema['enum']}")
    if isinstance(value, dict):
        _check_object(schema, value, where, problems)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: needs at least {schema['minItems']} item(s)")
        if "items" in schema:
            for i, item in enumerate(value):
                _check(schema["items"], item, f"{where}[{i}]", problems)


def _check_object(
    schema: Mapping[str, Any], value: dict[str, Any], where: str, problems: list[str]
) -> None:
    props: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            problems.append(f"{where}: missing required {name!r}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            _check(props[name], item, f"{name}", problems)
        elif extra is False:
            allowed = ", ".join(props) or "none"
            problems.append(f"{where}: unexpected {name!r} (allowed: {allowed})")
        elif isinstance(extra, Mapping):
            _check(extra, item, f"{name}", problems)


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
