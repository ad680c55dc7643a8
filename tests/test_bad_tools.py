"""A wrong value in ``tools=`` is a clear ConfigError before anything runs, not an
AttributeError wrapped as a bug."""

from __future__ import annotations

from pathlib import Path

import pytest

import harnessnb as hn


@pytest.mark.parametrize("bad", [1, "read_file", lambda path: path], ids=["int", "str", "plain"])
def test_a_value_that_is_not_a_tool_is_a_config_error(bad: object, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with hn.Store(":memory:") as store:
        with pytest.raises(hn.ConfigError, match=r"tools= takes tools \(functions made with"):
            hn.run_sync(hn.TaskContract("x", ws), hn.ScriptedProvider(["done"]), store=store,
                        tools=[bad])  # type: ignore[list-item]  # fmt: skip
        assert store.runs().empty
