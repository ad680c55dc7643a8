"""An error's context fields, declared once: ``Declared``.

A subclass of ``Declared`` names its context fields as class annotations (with a default
where the field is optional, ``context(...)`` where it needs more), and the one
``__init__`` here takes them as keywords: an unknown keyword or a missing field is a
``TypeError`` at the call, as with a dataclass. ``typing.dataclass_transform`` tells
type checkers the same, so mypy checks every raise's keywords. The fields a card shows
are the declared ones, in declaration order (base classes first), unless ``shown=False``.
A code derived from the fields (``PROVIDER_<KIND>``) comes from ``_code()`` when the
raise gives none.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Final, dataclass_transform

from ._renamed import moved_keywords

__all__ = ["Declared", "context"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


@dataclass(frozen=True)
class _Field:
    default: Any
    shown: bool


def context(*, default: Any = REQUIRED, shown: bool = True, kw_only: bool = True) -> Any:
    """A context field with more to say than its default: ``shown=False`` keeps it off
    cards and dicts; ``kw_only=False`` (the message only) makes it positional."""
    del kw_only  # positional is the message, taken by ``__init__`` itself
    return _Field(default, shown)


def _signature(cls: type, fields: dict[str, _Field]) -> inspect.Signature:
    """What ``inspect.signature(cls)`` and ``help()`` show: the message, then the fields."""
    hints = {}
    for klass in reversed(cls.__mro__):
        hints.update(inspect.get_annotations(klass))
    keyword = inspect.Parameter.KEYWORD_ONLY
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("message", positional, annotation=hints.get("message", "str"))]
    for name, field in fields.items():
        default = inspect.Parameter.empty if field.default is REQUIRED else field.default
        params.append(inspect.Parameter(name, keyword, default=default, annotation=hints[name]))
    return inspect.Signature(params)


@dataclass_transform(kw_only_default=True, field_specifiers=(context,))
class Declared:
    """Mixed into an exception class: its annotated fields set by one ``__init__``.

    The exception's own ``__init__`` (``HarnessError``'s: message and code) runs first.
    A subclass that must derive a field from others does it in ``_settle()``.
    """

    _FIELDS: ClassVar[dict[str, _Field]] = {}
    # Old keyword -> field, each warning (``_renamed.renamed`` on the class fills it).
    _RENAMED_KEYWORDS: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls._FIELDS)
        for name, annotation in inspect.get_annotations(cls).items():
            if name in ("message", "code"):  # HarnessError's own, declared for type checkers
                if isinstance(cls.__dict__.get(name), _Field):
                    delattr(cls, name)
                continue
            if str(annotation).startswith(("ClassVar", "Final")):
                continue
            value = cls.__dict__.get(name, REQUIRED)
            field = value if isinstance(value, _Field) else _Field(value, shown=True)
            fields.pop(name, None)  # a redeclared field moves to its new place
            fields[name] = field
            if isinstance(value, _Field):
                if field.default is REQUIRED:
                    delattr(cls, name)
                else:
                    setattr(cls, name, field.default)
        cls._FIELDS = fields
        # A class with an ``__init__`` of its own (``FallbackError``'s failures) shows that.
        own = cls.__init__ is not Declared.__init__
        cls.__signature__ = None if own else _signature(cls, fields)  # type: ignore[attr-defined]

    def __init__(self, message: str, *, code: str | None = None, **fields: Any) -> None:
        super().__init__(message, code=code)  # type: ignore[call-arg]
        moved_keywords(type(self).__name__, fields, type(self)._RENAMED_KEYWORDS)
        declared = type(self)._FIELDS
        unknown = sorted(fields.keys() - declared.keys())
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword {unknown}")
        missing = [n for n, f in declared.items() if f.default is REQUIRED and n not in fields]
        if missing:
            raise TypeError(f"{type(self).__name__}() missing keyword {missing}")
        for name, field in declared.items():
            setattr(self, name, fields.get(name, field.default))
        derived = self._code() if code is None else None
        if derived is not None:
            self.code = derived
        self._settle()

    def _code(self) -> str | None:
        """The code when none is given, from the fields (``PROVIDER_<KIND>``); None:
        the class's ``CODE``."""
        return None

    def _settle(self) -> None:
        """Fields derived from others, once all are set (``RateLimited.resets_at``)."""

    def _declared_fields(self) -> dict[str, Any]:
        """The shown fields' values, in declaration order."""
        return {n: getattr(self, n) for n, f in type(self)._FIELDS.items() if f.shown}

    def _fields(self) -> dict[str, Any]:
        return self._declared_fields()
