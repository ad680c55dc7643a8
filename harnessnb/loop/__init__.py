"""The run loop: the one place that ties providers, tools, policy and the store together.

- ``_contract``: ``TaskContract``, verifications, ``RunOutcome``;
- ``_driver``: the step loop (``run``/``run_sync``): budgets, retry, fallback, tool calls,
  the step commit, stall and verification;
- ``_verify``: checking a contract's verification; ``_result``: ``RunResult``;
- ``_durable``: resume, resolve/abandon, Record/Replay;
- ``_events``: the events a run emits; ``_bridge``: the loop thread for sync calls.

May import: ``tools``, ``providers``, ``store``, ``rules``. Never a face (cli, notebook).
"""
