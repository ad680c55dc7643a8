"""The run loop: the one place that ties providers, tools, policy and the store together.

- ``_contract``: ``TaskContract``, verifications, ``RunOutcome``;
- ``_driver``: ``run``/``run_sync`` and ``Driver``, which takes steps and commits each
  one (with the run's end, when it ends) in one store transaction; its lease;
- ``_recorder``: ``RunRecorder``, a run's life in the store (start with its lease,
  renewal, events, rows, the end with its outcome), for the driver and the agent CLIs;
- ``_state``: ``RunState``, a run between steps as one value (its checkpoint, restored
  whole on resume), and ``StepResult``;
- ``_outcome``: the pure rules that decide how a run ends (budgets, provider failures,
  the step's outcome, egress denial, what a resumed step does with a settled call);
- ``_model_call``: one model turn: retries, the run's deadline, one context shrink,
  attempt rows, counted into the run's state (attempts, retries, fallbacks, spend);
- ``_step_tools``: a step's tool calls: write-ahead intents, settling, finishing a
  step a previous process began;
- ``_servers``: ``RunServers``, a run's MCP servers opened once it is recorded, their
  tools offered, a resumed run's changed tools checked, all closed when it ends; the
  stand-in tools of a replay;
- ``_step_check``: stall detection and verification after the tools, and the step's
  decision;
- ``_conversation``: the messages the harness writes, shrinking to fit the context
  window, the conversation's checkpoint deltas and their replay;
- ``_output``: a typed answer asked for (``OutputSpec``: its JSON Schema, the strict
  form, validation), pure; ``_typed``: ``TypedAnswers``, a typed run's mode, each
  answer judged (refusal, truncated, schema violation) and asked again;
- ``_ask``: ``hn.ask``/``ask_sync``, one typed answer as a run of one step with no
  workspace tools;
- ``_verify``: checking a contract's verification; ``_result``: ``RunResult``;
- ``_durable``: resume, resolve/abandon, Record/Replay; ``_replay``: ``hn.replay``;
- ``_start``: a run's start, which an interrupt does not cut; ``_store_wait``: a run's
  store writes tried again while the store is busy or full;
- ``_events``: delivering the events a run emits (scrubbed; their classes are
  ``rules._events``); ``_bridge``: the loop thread for sync calls;
- ``_tracing``: which OpenTelemetry tracer provider a run is traced to (the process
  default ``hn.set_tracer_provider``), its spans exported from the store when it ends,
  a sweep's span its runs nest under;

May import: ``mcp``, ``tools``, ``providers``, ``store``, ``rules``. Never a face (cli, notebook).
"""
