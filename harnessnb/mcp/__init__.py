"""Tools served by Model Context Protocol servers (the optional ``harnessnb[mcp]`` extra).

Modules, each importing only those listed before it (no cycle):

- ``_tools``: ``MCPTool``, one server's tool as a harnessnb ``Tool`` (its effect from
  the server's annotations only where the server is trusted, its policy target
  ``mcp:SERVER/TOOL``), calling a ``ToolSource``;
- ``_toolset``: ``ToolServers``, a run's servers started together, their tools named
  without clashes and checked, a snapshot of what each offered, all closed together.

The SDK (``mcp``) is imported inside functions only: ``import harnessnb`` never imports
it.

May import: ``tools``, ``providers._completion`` and ``rules``. ``loop`` imports it;
nothing below does.
"""
