"""Tables as a notebook shows them: a DataFrame whose HTML scrolls in its own box."""

from __future__ import annotations

import functools
from typing import Any

from ..rules._html import Html, scrolling

__all__ = ["scrolling_frame"]


@functools.cache
def _scrolling_frame_type() -> type[Any]:
    import pandas as pd

    class ScrollingFrame(pd.DataFrame):
        """A DataFrame whose HTML scrolls sideways in its own box; what is made from it
        (a selection, a sum) is a plain DataFrame again."""

        @property
        def _constructor(self) -> Any:
            return pd.DataFrame

        def _repr_html_(self) -> str | None:
            inner: str | None = pd.DataFrame._repr_html_(self)  # type: ignore[attr-defined]
            return None if inner is None else str(scrolling(Html(inner)))

    return ScrollingFrame


def scrolling_frame(frame: Any) -> Any:
    """``frame``, shown in a box that scrolls when wider than the notebook (the failures
    table, 13 columns, once made a 968 px notebook 1533 px wide)."""
    return _scrolling_frame_type()(frame)
