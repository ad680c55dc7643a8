"""Tools served by Model Context Protocol servers (the optional ``harnessnb[mcp]`` extra).

Modules, each importing only those listed before it (no cycle):

- ``_server``: ``MCPServer``, how to reach one server (stdio command or Streamable HTTP
  URL), its name, trust and timeout; ``parse`` (the faces' words), ``describe``;
- ``_failures``: what an SDK failure was, as an ``MCPError`` of one ``MCPErrorKind``
  (nested exception groups unwrapped, JSON-RPC codes, httpx2 errors by class);
- ``_stderr``: a stdio server's stderr read through a pipe into a bounded, scrubbed
  ring, and the watcher that says the server's pid and exit code;
- ``_connection``: ``Connection``, one live session with one server in its own owner
  task (``ServedTool``, ``Called``), started lazily, every request bounded in time;
- ``_tools``: ``MCPTool``, one server's tool as a harnessnb ``Tool`` (its effect from
  the server's annotations only where the server is trusted, its policy target
  ``mcp:SERVER/TOOL``), calling a ``ToolSource``;
- ``_toolset``: ``ToolServers``, a run's servers started together, their tools named
  without clashes and checked, a snapshot of what each offered, all closed together.

The SDK (``mcp``) is imported inside functions only: ``import harnessnb`` never imports
it, and a missing SDK is a ``ConfigError`` naming ``pip install 'harnessnb[mcp]'``.

May import: ``tools``, ``providers._completion`` and ``rules``. ``loop`` imports it;
nothing below does.
"""
