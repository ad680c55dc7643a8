"""A tool's JSON schema: derived from a typed signature and its docstring, and checked.

``schema_from_signature`` turns type hints into a schema (str, int, float, bool,
list[...], dict, Optional, Literal, Enum, and ``Annotated[T, {...}]`` whose mapping
adds keywords such as ``pattern`` or ``minimum``); ``parse_docstring`` reads a
Google-style summary and ``Args:`` section; ``check_schema`` checks a schema against
the draft-07 meta-schema; ``validate_args`` checks a call's arguments with a compiled
JSON Schema validator (``fastjsonschema``).

The docstring parser is our own ~40 lines rather than ``docstring-parser``: it needs
only the summary and the ``Args:`` entries, and a runtime dependency for that would
cost more (install, import time) than it saves.
"""

from __future__ import annotations

import copy
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from ..rules._errors import ConfigError
from ..rules._text import shorten

__all__ = [
    "check_schema",
    "object_schema",
    "parse_docstring",
    "schema_from_signature",
    "schema_problems",
    "shipped",
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

# fastjsonschema rather than jsonschema: ``import jsonschema`` loads its format
# checkers, and where JupyterLab is installed (jsonschema[format-nongpl]) they import
# rfc3987-syntax, which builds a lark grammar as it is imported: 4 to 12 s before a
# new kernel's first run could start (issue #24); no jsonschema setting avoids it.
# fastjsonschema compiles a schema to Python (patterns are ``re``'s), reports every
# violation at once with ``fast_fail=False`` (keyword, path, value: ``_describe``
# words them), and imports nothing else. Compiling is paid when needed: a tool's
# validator at its first call, the meta-schema at the first schema harnessnb did
# not write (the built-in tools' are ``shipped``; a test checks them).

# Assertions of drafts 2019-09 and 2020-12 that fastjsonschema (drafts 4 to 7) would
# skip: a schema using one is refused rather than silently not enforced.
_UNENFORCED = frozenset({
    "prefixItems", "dependentRequired", "dependentSchemas", "unevaluatedProperties",
    "unevaluatedItems", "minContains", "maxContains", "$dynamicRef", "$recursiveRef",
})  # fmt: skip
# Keywords whose value maps names to schemas, and keywords whose value is data.
_NAME_MAPS = frozenset({"properties", "patternProperties", "definitions", "$defs", "dependencies"})
_DATA = frozenset({"enum", "const", "default", "examples", "required", "title", "description"})


class _NoRemoteRefs(Mapping[str, Callable[[str], Any]]):
    """fastjsonschema fetches a ``$ref`` to another document with urllib for any URI
    scheme it has no handler for: here every scheme has one, and it refuses. A schema
    is data; checking it reaches no network and no file."""

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse_remote

    def __contains__(self, scheme: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _refuse_remote(uri: str) -> Any:
    from fastjsonschema import JsonSchemaDefinitionException

    raise JsonSchemaDefinitionException(f"$ref {uri!r} names another document (not fetched)")


def _compile(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    """``schema`` as a validator (a copy is compiled: the compiler rewrites ``$ref``s).

    Raises:
        ConfigError: the schema cannot be compiled (a bad ``$ref`` or pattern...).
    """
    import fastjsonschema

    try:
        return fastjsonschema.compile(
            copy.deepcopy(dict(schema)),
            handlers=_NoRemoteRefs(),
            use_default=False,  # check the arguments, never fill them in
            use_formats=False,  # ``format`` is an annotation, as the standard's default
            fast_fail=False,  # every violation, not the first
        )
    except (fastjsonschema.JsonSchemaDefinitionException, re.error) as exc:
        raise ConfigError(str(exc)) from exc
    except (RecursionError, MemoryError, SyntaxError) as exc:
        # Python's compiler refuses the code of a schema nested ~20 levels deep
        # ("too many statically nested blocks", indentation, its parser's stack).
        said = f" ({exc})" if str(exc) else ""
        raise ConfigError(f"the schema is nested too deeply to compile{said}") from exc


_META: list[Callable[[Any], Any]] = []  # the compiled meta-schema, once needed


def schema_problems(schema: Mapping[str, Any]) -> list[str]:
    """Why ``schema`` cannot be a tool's parameters: not a draft-07 JSON Schema, a
    keyword harnessnb cannot enforce, or no validator can be compiled (empty: fine)."""
    from fastjsonschema import JsonSchemaValueException, JsonSchemaValuesException

    from ._metaschema import DRAFT_07

    if not _META:
        _META.append(_compile(DRAFT_07))
    try:
        _META[0](schema)
        keyword = _unenforced(schema)
    except JsonSchemaValuesException as exc:
        return _unique(_schema_words(e) for e in exc.errors)
    except JsonSchemaValueException as exc:
        return [_schema_words(exc)]
    except RecursionError:
        return ["the schema is nested too deeply to check"]
    if keyword is not None:
        return [f"{keyword!r} is a keyword of a later draft that harnessnb does not enforce"]
    try:
        _validator(schema)
    except ConfigError as err:
        return [err.message]
    return []


def _schema_words(error: Any) -> str:
    """A meta-schema violation: where in the schema, and what."""
    where = ".".join(str(p) for p in _path(error.name)) or "the schema"
    if error.rule in ("anyOf", "oneOf"):
        return f"{where}: {_short(error.value)} matches none of the allowed forms"
    return f"{where}: {_message(error)}"


def _unenforced(node: Any) -> str | None:
    """The first keyword of ``_UNENFORCED`` used anywhere a schema is, or None."""
    if isinstance(node, list):
        return next(filter(None, map(_unenforced, node)), None)
    if not isinstance(node, Mapping):
        return None
    for key, value in node.items():
        if key in _UNENFORCED:
            return str(key)
        if key in _DATA:
            continue
        named = key in _NAME_MAPS and isinstance(value, Mapping)
        found = (
            next(filter(None, map(_unenforced, value.values())), None)
            if named
            else (_unenforced(value))
        )
        if found is not None:
            return found
    return None


# Schemas already found valid: the check costs a few milliseconds per tool, and every
# run builds an executor. A tool keeps its schema object from run to run (the
# built-in ones are class attributes), so the object itself is the cheap key (kept
# here, so its id cannot be reused); an equal schema in a new object is found by its
# canonical JSON.
_VALID: set[str] = set()
_VALID_OBJECTS: dict[int, Mapping[str, Any]] = {}
_SHIPPED: dict[int, Mapping[str, Any]] = {}


def shipped(schema: dict[str, Any]) -> dict[str, Any]:
    """Mark a schema harnessnb ships (a built-in tool's): ``check_schema`` trusts it,
    so a first run compiles nothing (tests/test_tools.py checks each one)."""
    _SHIPPED[id(schema)] = schema
    return schema


def check_schema(schema: Mapping[str, Any], where: str) -> None:
    """Raise ``ConfigError`` unless ``schema`` is a valid JSON Schema (a tool's parameters)."""
    if _SHIPPED.get(id(schema)) is schema or _VALID_OBJECTS.get(id(schema)) is schema:
        return
    key = json.dumps(schema, sort_keys=True, default=repr)
    if key in _VALID:
        _remember(schema)
        return
    problems = schema_problems(schema)
    if problems:
        message = f"{where}: the parameters are not a valid JSON Schema: {'; '.join(problems)}"
        raise ConfigError(message)
    _VALID.add(key)
    _remember(schema)


def _remember(schema: Mapping[str, Any]) -> None:
    if len(_VALID_OBJECTS) >= 1024:  # tools built anew for every run: keep memory flat
        _VALID_OBJECTS.clear()
    _VALID_OBJECTS[id(schema)] = schema


def validate_args(schema: Mapping[str, Any], args: Any) -> list[str]:
    """Problems found checking ``args`` against ``schema`` (empty when valid).

    Every assertion of JSON Schema drafts 4 to 7 is enforced (``pattern``,
    ``minimum``, ``enum``, ``minItems``...; a later draft's ``$schema`` is read as
    draft 7, and ``check_schema`` refuses the later drafts' own assertions);
    ``format`` is an annotation only, as the standard says by default. Regular
    expressions are Python's (``re.search``).
    """
    from fastjsonschema import JsonSchemaValueException, JsonSchemaValuesException

    try:
        validator = _validator(schema)
        validator(args)
    except ConfigError as err:  # a hand-written schema the check missed
        return [f"the tool's schema cannot be applied: {err.message}"]
    except JsonSchemaValuesException as exc:
        return _unique(p for error in exc.errors for p in _describe(error))
    except JsonSchemaValueException as exc:
        return _describe(exc)
    except (TypeError, ValueError) as exc:  # a keyword of the wrong type, unchecked
        return [f"the tool's schema cannot be applied: {exc}"]
    except RecursionError:  # a ``$ref`` that never ends (``{"$ref": "#"}``), or too deep
        return ["the arguments or the schema are nested too deeply to check"]
    return []


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# A validator per schema object (as ``_VALID_OBJECTS``: the object is the key and is
# kept, so its id cannot be reused): compiling one costs more than most checks.
_VALIDATORS: dict[int, tuple[Mapping[str, Any], Callable[[Any], Any]]] = {}


def _validator(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    kept = _VALIDATORS.get(id(schema))
    if kept is not None and kept[0] is schema:
        return kept[1]
    validator = _compile(schema)
    if len(_VALIDATORS) >= 1024:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator


def _describe(error: Any) -> list[str]:
    """One fastjsonschema error in the words the model sees (``where: what``)."""
    where = _where(_path(error.name))
    value, expected, keyword = error.value, error.rule_definition, error.rule
    if keyword == "required":
        missing = [n for n in expected if isinstance(value, dict) and n not in value]
        return [f"{where}: missing required {name!r}" for name in missing]
    if keyword == "additionalProperties" and isinstance(value, dict):
        props = error.definition.get("properties", {})
        patterns = error.definition.get("patternProperties", {})
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
    if keyword in ("minItems", "maxItems"):
        bound = "at least" if keyword == "minItems" else "at most"
        return [f"{where}: needs {bound} {expected} item(s)"]
    if keyword == "pattern":
        return [f"{where}: {_short(value)} does not match the pattern {expected!r}"]
    if keyword in ("minLength", "maxLength"):
        bound = "at least" if keyword == "minLength" else "at most"
        return [f"{where}: must be {bound} {expected} character(s), got {len(value)}"]
    return [f"{where}: {_message(error)}"]


_BOUNDS = {
    "minimum": "is less than the minimum of",
    "maximum": "is greater than the maximum of",
    "exclusiveMinimum": "is less than or equal to the minimum of",
    "exclusiveMaximum": "is greater than or equal to the maximum of",
    "multipleOf": "is not a multiple of",
}


def _message(error: Any) -> str:
    """What is wrong, without the where: a bound in jsonschema's words (what models
    and users were told before), else fastjsonschema's message, the value shortened
    (it may be a whole file's content)."""
    value, expected, keyword = error.value, error.rule_definition, error.rule
    if keyword in _BOUNDS:
        return f"{_short(value)} {_BOUNDS[keyword]} {expected}"
    if keyword == "const":
        return f"{_short(expected)} was expected, got {_short(value)}"
    if keyword == "uniqueItems":
        return f"{_short(value)} has non-unique elements"
    message = str(error.message)
    name = str(error.name or "")
    return message.removeprefix(name).strip() or message


_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _path(name: str | None) -> list[str | int]:
    """fastjsonschema's ``data.tags[0]`` as ``["tags", 0]``."""
    rest = (name or "").removeprefix("data")
    return [int(i) if i else key for key, i in _PATH_PART.findall(rest)]


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
