"""Old public spellings kept working for one release, each warning with its new name.

The naming rule (docs/api.md, "Names and units"): a quantity's unit is the suffix of its
name, ``_s`` seconds, ``_ms`` milliseconds, ``_usd`` US dollars; a count is a bare noun
(``steps``, ``tokens``). A name renamed by that rule keeps its old spelling for one
release: as a keyword (``renamed_keywords``, or ``renamed`` on a class's ``__init__``)
and as an attribute (``renamed``: a property), each use warning ``DeprecationWarning``
with the new name. mypy sees the new names only.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

__all__ = ["moved_keywords", "renamed", "renamed_keywords", "warn_renamed"]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


def warn_renamed(owner: str, old: str, new: str, *, keyword: bool, stacklevel: int = 3) -> None:
    """Warn that ``owner``'s ``old`` is now ``new`` (a keyword: ``old=``)."""
    eq = "=" if keyword else ""
    warnings.warn(
        f"{owner}: {old}{eq} is deprecated and goes in the next release; use {new}{eq}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def moved_keywords(owner: str, kwargs: dict[str, Any], renames: Mapping[str, str]) -> None:
    """Move each old keyword in ``kwargs`` to its new name, warning; both given is a
    ``TypeError``, as Python's own "got multiple values for argument"."""
    for old, new in renames.items():
        if old in kwargs:
            if new in kwargs:
                raise TypeError(f"{owner}: {old}= and {new}= name one thing; give {new}= only")
            warn_renamed(owner, old, new, keyword=True, stacklevel=4)
            kwargs[new] = kwargs.pop(old)


def renamed_keywords(**renames: str) -> Callable[[F], F]:
    """Decorate a function whose keywords ``old=new`` were renamed: ``old=`` still works,
    warning. (An async function stays one: the wrapper returns its coroutine.)"""

    def decorate(fn: F) -> F:
        owner = fn.__qualname__

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            moved_keywords(owner, kwargs, renames)
            return fn(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


def renamed(**renames: str) -> Callable[[C], C]:
    """Decorate a class whose fields ``old=new`` were renamed: ``old=`` still works as a
    keyword of its constructor, and ``obj.old`` as a property reading ``obj.new``; each
    warns. On an error class with declared fields (``_fields.Declared``) the renames join
    its ``_RENAMED_KEYWORDS``, which the one ``__init__`` there moves (a subclass inherits
    them), so the class gets no ``__init__`` of its own unless it had one."""

    def decorate(cls: C) -> C:
        declared = getattr(cls, "_RENAMED_KEYWORDS", None)
        if declared is not None:  # a ``_fields.Declared`` class: its one __init__ moves them
            cls._RENAMED_KEYWORDS = {**declared, **renames}  # type: ignore[attr-defined]
        if declared is None or "__init__" in vars(cls):
            init: Callable[..., None] = cls.__init__  # type: ignore[misc]

            @functools.wraps(init)
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                moved_keywords(type(self).__name__, kwargs, renames)
                init(self, *args, **kwargs)

            cls.__init__ = __init__  # type: ignore[misc]
        for old, new in renames.items():
            setattr(cls, old, _alias(old, new))
        return cls

    return decorate


def _alias(old: str, new: str) -> property:
    def read(self: object) -> Any:
        warn_renamed(type(self).__name__, old, new, keyword=False)
        return getattr(self, new)

    return property(read, doc=f"Deprecated: ``{new}``.")
