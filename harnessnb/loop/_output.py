"""A typed answer asked for: the pure part (no I/O, no provider).

``OutputSpec.of(T)`` holds what a run needs to ask for an answer of type ``T`` (a
pydantic model, a dataclass, a TypedDict, or a JSON Schema dict) and to check one:
its JSON Schema, the strict form OpenAI's structured outputs take (``strict_schema``,
None when it cannot be made strict), and ``validate`` (a parsed JSON value to a ``T``,
or the reasons it is not one, one short line each). pydantic is the ``harnessnb[typed]``
extra, imported here only when a Python type is given; a dict schema is checked with
the tools' validator (``tools/_schema.py``).

Decisions:

- strict form: every object closed (``additionalProperties: false``) and every property
  required; a property that was optional stays optional only by being nullable (its
  schema already admits null, as pydantic writes ``x: int | None = None``). A schema
  that cannot be made so (an optional property that is not nullable, an open object,
  a root that is not an object, a keyword OpenAI's strict mode refuses) has no strict
  form: ``auto`` then asks in tool mode. ``$defs``/``$ref`` are kept (OpenAI takes them).
- A dict ``T`` is validated as given and the answer returned as the parsed JSON.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from collections.abc import Mapping
from typing import Any, Final, Literal

from ..rules._errors import ConfigError
from ..rules._text import shorten
from ..tools._schema import check_schema, validate_args

__all__ = [
    "FINAL_ANSWER",
    "MODES",
    "OutputMode",
    "OutputSpec",
    "Valid",
    "answer_text",
    "schema_difference",
    "strict_schema",
]

OutputMode = Literal["auto", "native", "tool", "prompted"]
MODES: Final = ("auto", "native", "tool", "prompted")
FINAL_ANSWER: Final = "final_answer"  # the tool a tool-mode answer is given through
MAX_REASONS: Final = 10  # validation errors kept per answer
REASON_CHARS: Final = 300  # and the length of each

# Keywords OpenAI's strict mode refuses (its structured outputs guide).
_NOT_STRICT: Final = frozenset(
    {"allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
     "patternProperties", "unevaluatedProperties", "propertyNames"}
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Valid:
    """A validated answer: ``value`` is the ``T`` (for a dict schema, the JSON value)."""

    value: Any


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """A typed answer asked for: ``target`` (the ``T`` given), ``schema`` (its JSON
    Schema), ``name`` (the schema's name on the wire), ``strict`` (OpenAI's strict
    form, or None). Build it with :meth:`of`."""

    target: Any = dataclasses.field(compare=False)
    schema: Mapping[str, Any]
    name: str
    strict: Mapping[str, Any] | None

    @classmethod
    def of(cls, target: Any) -> OutputSpec:
        """The spec of ``target``; ``ConfigError`` when it is no type of answer."""
        if isinstance(target, OutputSpec):
            return target
        try:
            return cls._of(target)
        except RecursionError:
            raise ConfigError(
                "TaskContract(output=...): the schema is nested too deeply to use"
            ) from None

    @classmethod
    def _of(cls, target: Any) -> OutputSpec:
        if isinstance(target, Mapping):
            schema = dict(target)
            check_schema(schema, "TaskContract(output=...)")
            title = schema.get("title")
            name = title if isinstance(title, str) and title else "answer"
        elif _is_typed(target):
            schema = _adapter(target).json_schema()
            name = target.__name__
        else:
            raise ConfigError(
                "TaskContract(output=...): give a pydantic model, a dataclass, a TypedDict "
                f"or a JSON Schema dict, not {target!r}"
            )
        wire_name = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "answer"
        return cls(target, schema, wire_name, strict_schema(schema))

    @property
    def typed(self) -> bool:
        """``T`` is a Python type (validated by pydantic), not a schema dict."""
        return not isinstance(self.target, Mapping)

    def validate(self, raw: Any) -> Valid | list[str]:
        """``raw`` (a parsed JSON value) as a ``T``, or why not (short lines, capped)."""
        if not self.typed:
            problems = validate_args(self.schema, raw)
            return _capped(problems) if problems else Valid(raw)
        from pydantic import ValidationError

        try:
            return Valid(_adapter(self.target).validate_json(json.dumps(raw)))
        except ValidationError as exc:
            lines = [
                f"{'.'.join(str(p) for p in e['loc']) or '(the answer)'}: {e['msg']}"
                for e in exc.errors()
            ]
            return _capped(lines)

    def check_text(self, text: str) -> Valid | list[str]:
        """An answer given as text (native or prompted mode): parsed, then validated."""
        parsed = parse_json(text)
        return parsed if isinstance(parsed, list) else self.validate(parsed.value)

    def to_dict(self) -> dict[str, Any]:
        """What a stored contract keeps (a Python type cannot be stored)."""
        return {"name": self.name, "schema": dict(self.schema)}


def _capped(lines: list[str]) -> list[str]:
    kept = [shorten(line, REASON_CHARS) for line in lines[:MAX_REASONS]]
    if len(lines) > MAX_REASONS:
        kept.append(f"... and {len(lines) - MAX_REASONS} more")
    return kept


def _is_typed(target: Any) -> bool:
    """A class pydantic can validate as an answer: a model, a dataclass, a TypedDict."""
    if not isinstance(target, type):
        return False
    if dataclasses.is_dataclass(target) or typing.is_typeddict(target):
        return True
    if issubclass(target, dict) and hasattr(target, "__required_keys__"):
        return True  # typing_extensions' TypedDict (what pydantic wants before 3.12)
    return any(
        c.__module__.startswith("pydantic") and c.__name__ == "BaseModel" for c in target.__mro__
    )


@functools.lru_cache(maxsize=128)  # one adapter per type (building one costs)
def _adapter(target: Any) -> Any:
    try:
        from pydantic import PydanticUserError, TypeAdapter
    except ImportError as exc:  # pragma: no cover - the test extra has it
        raise ConfigError(
            "a typed answer of a Python type needs pydantic: pip install 'harnessnb[typed]' "
            "(or give a JSON Schema dict)"
        ) from exc
    try:
        adapter = TypeAdapter(target)
        adapter.json_schema()
    except (PydanticUserError, TypeError, ValueError) as exc:
        raise ConfigError(f"TaskContract(output={target!r}): no JSON Schema for it: {exc}") from exc
    return adapter


_FENCE: Final = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


_MAX_STARTS: Final = 1000  # the ``{``s tried for an object in an answer's text, at most


def parse_json(text: str) -> Valid | list[str]:
    """The JSON value in an answer's text: a fenced ```json block, the whole text, or
    its last top-level JSON object; else why not. An answer nested deeper than the
    parser goes is a reason, never a ``RecursionError`` out of the run."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)][::-1]
    candidates.append(text)
    try:
        for candidate in candidates:
            try:
                return Valid(json.loads(candidate))
            except ValueError:
                continue
        found = _last_object(text)
    except RecursionError:
        return ["the answer's JSON is nested too deeply to read"]
    if found is not None:
        return found
    if not text.strip():
        return ["the answer is empty: no JSON in it"]
    return [f"the answer is not JSON: {shorten(text.strip(), 120)!r}"]


def _last_object(text: str) -> Valid | None:
    """The last top-level JSON object in ``text`` (an object inside another is part of
    it, never the answer), read left to right; at most ``_MAX_STARTS`` places tried, so
    a text of stray braces costs a bounded time."""
    decoder = json.JSONDecoder()
    found: Valid | None = None
    start, tries = text.find("{"), 0
    while start != -1 and tries < _MAX_STARTS:
        tries += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        found, start = Valid(value), text.find("{", end)
    return found


def answer_text(value: Any) -> str:
    """A validated answer as the JSON text a run row keeps."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json")
    return json.dumps(value, default=str)


def schema_difference(stored: Any, given: Any, at: str = "", limit: int = 5) -> list[str]:
    """Where two JSON Schemas differ: a line per differing path (at most ``limit``),
    e.g. ``properties.population.type: stored 'integer', given 'string'``; [] when equal."""
    if stored == given:
        return []
    where = at or "(the schema)"
    if isinstance(stored, Mapping) and isinstance(given, Mapping):
        lines: list[str] = []
        for key in sorted(set(stored) | set(given), key=str):
            path = f"{at}.{key}" if at else str(key)
            if key not in given:
                lines.append(f"{path}: only in the stored schema")
            elif key not in stored:
                lines.append(f"{path}: only in the given type's")
            else:
                lines += schema_difference(stored[key], given[key], path, limit)
            if len(lines) >= limit:
                break
        return lines[:limit]
    said = f"stored {shorten(json.dumps(stored), 80)}, given {shorten(json.dumps(given), 80)}"
    return [f"{where}: {said}"]


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """OpenAI's strict form of ``schema`` (module docstring), or None when there is none."""
    if schema.get("type") != "object":
        return None
    try:
        return typing.cast(dict[str, Any], _strict(schema))
    except _NotStrict:
        return None


class _NotStrict(Exception):
    pass


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, Mapping):
        return node
    if _NOT_STRICT & node.keys():
        raise _NotStrict
    out = {k: _strict(v) for k, v in node.items() if k != "default"}
    if node.get("type") == "object" or "properties" in node:
        extra = node.get("additionalProperties", False)
        if extra not in (False, None):
            raise _NotStrict  # an open object (a dict of any keys) is not strict
        props: Mapping[str, Any] = node.get("properties", {})
        required = set(node.get("required", ()))
        for key, prop in props.items():
            if key not in required and not _nullable(prop):
                raise _NotStrict
        out["additionalProperties"] = False
        out["required"] = list(props)
    return out


def _nullable(prop: Any) -> bool:
    if not isinstance(prop, Mapping):
        return False
    kind = prop.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_nullable(p) for p in prop.get("anyOf", ()))
