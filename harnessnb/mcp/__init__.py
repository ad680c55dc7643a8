"""Tools served by Model Context Protocol servers (the optional ``harnessnb[mcp]`` extra).

Modules, each importing only those listed before it (no cycle):

- ``_server``: ``MCPServer``, how to reach one server (stdio command or Streamable HTTP
  URL), its name, trust and timeout; ``parse`` (the faces' words), ``describe``.

The SDK (``mcp``) is imported inside functions only: ``import harnessnb`` never imports
it, and a missing SDK is a ``ConfigError`` naming ``pip install 'harnessnb[mcp]'``.

May import: ``tools``, ``providers._completion`` and ``rules``. ``loop`` imports it;
nothing below does.
"""
