"""An error's cause chain, and how a ``HarnessError`` crosses a process boundary (a Dask
worker's error reaching the client): pickled with its fields, rebuilt without
``__init__``, scrubbed on the way out.

The sender scrubs (it knows its keys; the receiver may not): every string of the
error's state, and the messages of its live cause chain in place, since Dask pickles
that chain as well (tblib). The chain also travels as its scrubbed ``Type: message``
lines (``CAUSE_LINES``), which the rebuilt error shows: a foreign cause may not pickle.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from ._secrets import scrub, scrub_exception

__all__ = ["CAUSE_LINES", "cause_chain", "rebuild", "reduce_error"]

# The attribute an unpickled error keeps its cause chain's lines in.
CAUSE_LINES: Final = "_cause_lines"

E = TypeVar("E", bound=BaseException)


def cause_chain(err: BaseException) -> list[BaseException]:
    """The exceptions ``err`` was raised from or during, nearest first (at most 10)."""
    chain: list[BaseException] = []
    seen: set[int] = {id(err)}
    cur = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    while cur is not None and id(cur) not in seen and len(chain) < 10:
        chain.append(cur)
        seen.add(id(cur))
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return chain


def reduce_error(err: BaseException, causes: list[str]) -> tuple[Any, ...]:
    """``err.__reduce__()``: rebuilt by ``rebuild``, its state and ``causes`` scrubbed."""
    scrub_exception(err.__cause__)
    scrub_exception(err.__context__)
    state = {key: _scrubbed(value) for key, value in err.__dict__.items()}
    state[CAUSE_LINES] = _scrubbed(causes)
    return (rebuild, (type(err), _scrubbed(err.args)), state)


def rebuild(cls: type[E], args: tuple[Any, ...]) -> E:
    """An error of ``cls`` with ``args``, not initialised: pickle then sets its fields."""
    return cls.__new__(cls, *args)


def _scrubbed(value: Any) -> Any:
    """``value`` with its strings scrubbed, into lists, tuples and dicts."""
    if isinstance(value, str):
        return scrub(value)
    if type(value) in (list, tuple):  # exactly: a subclass may not rebuild from items
        return type(value)(_scrubbed(v) for v in value)
    if type(value) is dict:
        return {k: _scrubbed(v) for k, v in value.items()}
    return value
