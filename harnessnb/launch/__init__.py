"""What the two faces (the ``harnessnb`` command and the ``%harness`` magics) share.

- ``_choose``: which provider a face's words name (``--provider``, keys in the
  environment, the demo model), and ``--verify``/``--verify-cmd`` parsing.
- ``_options``: the run and resume options of both faces (names, defaults,
  validation, help) and what they mean (contract, policy, agent driver).
- ``_mcp_spec``: ``--mcp SPEC`` (``MCPServer.parse``'s words) and ``--mcp-trust NAME``,
  the run's MCP servers (``mcp_from``).
- ``_otel``: ``--otel-endpoint URL``, the run's spans over OTLP/HTTP (a factory of
  one batching ``TracerProvider`` per URL per process, picklable to Dask workers).
- ``_sweep_options``: the sweep's options of both faces and what they mean.
- ``_scorer_specs``: ``--score SPEC``, a built-in scorer named in a word.
- ``_words``: a run event in words, for the command's progress lines and the
  notebook's text and widget progress.

May import: ``agents``, ``demo``, ``loop`` and everything beneath. Never IPython.
"""
