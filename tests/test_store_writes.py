"""The store's writes declared once: the same op runs now (``write``), queued for group
commit (``submit``), or awaited from asyncio (``store_writer(store).queued``), with the
same rows, results and errors; the writer's methods written out, each running its op."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import harnessnb as hn
from harnessnb import Store
from harnessnb.store import _writes
from harnessnb.store._leases import Lease
from harnessnb.store._writer import QueuedWriter, StoreWriter, store_writer
from tests.store_helpers import AT, run_row, step_kwargs


async def _drive(store: Store, run_id: str, steps: int) -> None:
    """What the run loop writes for one run: start, steps, the last one ending the run."""
    lease = await store_writer(store).queued.start_run(
        run_row(run_id), "kernel-a", now=AT, ttl_s=30
    )
    for step in range(1, steps + 1):
        row, kwargs = step_kwargs(step, tokens=10)
        finish = None
        if step == steps:
            finish = {"outcome": "finished", "finished_at": AT + 60, "error": None}
        await store_writer(store).queued.commit_step(
            run_id, row, **kwargs, lease=lease, finish=finish
        )


async def test_queued_writes_of_concurrent_runs_all_land_in_shared_transactions(
    store: Store, batches: list[list[str]]
) -> None:
    runs = [f"r{i:02d}" for i in range(12)]
    await asyncio.gather(*(_drive(store, run_id, 3) for run_id in runs))
    frame = store.runs().set_index("run_id")
    assert frame["steps"].to_dict() == dict.fromkeys(runs, 3)
    assert frame["tokens"].to_dict() == dict.fromkeys(runs, 30)
    assert frame["outcome"].to_dict() == dict.fromkeys(runs, "finished")
    assert len(store.steps()) == 36 and len(store.attempts()) == 108
    leases = store.sql("SELECT run_id, generation, released FROM leases ORDER BY run_id")
    assert leases.values.tolist() == [[r, 1, True] for r in runs]
    # 48 writes (a start and three steps per run) in fewer transactions: grouped.
    assert sum(len(b) for b in batches) == 48
    assert max(len(b) for b in batches) > 1


async def test_a_queued_lease_expires_and_is_taken_over(store: Store) -> None:
    first = await store_writer(store).queued.start_run(run_row("r1"), "kernel-a", now=AT, ttl_s=5)
    with pytest.raises(hn.ConflictError):  # still live: not taken
        await store_writer(store).queued.acquire_lease("r1", "kernel-b", now=AT + 1,
                                         owner_alive=lambda _: True)  # fmt: skip
    second = await store_writer(store).queued.acquire_lease("r1", "kernel-b", now=AT + 6,
                                              owner_alive=lambda _: True)  # fmt: skip
    assert second == Lease("r1", "kernel-b", 2, AT + 6 + 30.0)
    row, kwargs = step_kwargs(1)
    with pytest.raises(hn.ConflictError) as info:
        await store_writer(store).queued.commit_step("r1", row, **kwargs, lease=first)
    assert info.value.owner == "kernel-b"
    with pytest.raises(hn.ConflictError):
        await store_writer(store).queued.renew_lease(first)
    await store_writer(store).queued.commit_step("r1", row, **kwargs, lease=second)
    assert store.steps()["run_id"].tolist() == ["r1"]
    assert store.runs()["steps"].tolist() == [1]


def test_an_op_runs_the_same_now_or_queued(store: Store) -> None:
    now = store_writer(store).write(_writes.start_run(run_row("r1"), "kernel-a", now=AT, ttl_s=10))
    queued = store_writer(store).submit(
        _writes.start_run(run_row("r2"), "kernel-a", now=AT, ttl_s=10)
    )
    assert now == Lease("r1", "kernel-a", 1, AT + 10)
    assert queued.result(timeout=10) == Lease("r2", "kernel-a", 1, AT + 10)
    again = store_writer(store).submit(_writes.start_run(run_row("r1"), "kernel-a"))
    error = again.exception(timeout=10)
    assert isinstance(error, hn.StoreError) and error.kind == "duplicate"
    missing = store_writer(store).submit(_writes.settle_tool_call("r1", 1, 0, status="ok"))
    error = missing.exception(timeout=10)
    assert isinstance(error, hn.StoreError) and error.kind == "missing"
    assert error.path == store.path


WRITES = list(_writes.__all__)


@pytest.mark.parametrize("name", WRITES)
def test_every_write_is_a_writer_method_and_a_queued_coroutine_with_its_signature(
    name: str,
) -> None:
    build = getattr(_writes, name)
    params = inspect.signature(build).parameters
    for owner in (StoreWriter, QueuedWriter):
        method = getattr(owner, name)
        signature = inspect.signature(method)
        assert list(signature.parameters) == ["self", *params]
        for param, declared in params.items():
            assert signature.parameters[param].kind == declared.kind
            assert signature.parameters[param].default == declared.default
        assert f"``_writes.{name}``" in (method.__doc__ or "")
    assert inspect.iscoroutinefunction(getattr(QueuedWriter, name))
    assert not inspect.iscoroutinefunction(getattr(StoreWriter, name))
