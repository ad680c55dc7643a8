"""What the agent can do in its workspace, and who may let it.

- ``_tool``: the tool protocol (``Effect``, ``@tool``, JSON schema from a signature) and
  the executor that runs one tool call through the gate;
- ``_workspace``: the workspace boundary and the built-in tools (read, write, edit,
  list, find, grep, run_command);
- ``_approval``: approvers (``ApproveAll``, ``DenyAll``, callables) and the request they see;
- ``_process``: the one subprocess runner (process group, bounded capture, kill).

May import: ``rules`` and ``providers._completion`` (a ``ToolCall`` is what the model
asked for). Knows nothing of the store, the run loop or the faces.
"""
