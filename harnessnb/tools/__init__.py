"""What the agent can do in its workspace, and who may let it.

Modules, each importing only those listed before it (no cycle):

- ``_blocking``: blocking work awaited on a daemon thread;
- ``_approval``: approvers (``ApproveAll``, ``DenyAll``, callables) and the request they see;
- ``_gate``: the one gate an act passes: policy verdict, the approver when the rule
  says ask, refusal with its event (used by the executor and ``hn.Command``);
- ``_metaschema``: the draft-07 meta-schema, as a value;
- ``_schema``: a tool's JSON schema from a signature and docstring, and argument
  validation;
- ``_workspace``: the workspace folder and its containment rule;
- ``_landlock_exec``: Landlock's kernel interface and the sandbox launcher;
- ``_landlock``: the Landlock rules, pure; ``_host_paths``: the host folders under /tmp a
  sandboxed command needs bound back; ``_sandbox``: commands in an OS sandbox;
- ``_process``: the one subprocess runner (process group, bounded capture, deadline,
  SIGTERM then SIGKILL), behind ``run_command``, ``hn.Command`` and the agent CLIs;
- ``_protocol``: the tool protocol (``Effect``, ``Tool``, ``@tool``, ``ToolContext``,
  ``ToolOutput``, ``ToolResult``);
- ``_fileio``: I/O on a walk's descriptors (the policy judged again, atomic writes);
- ``_builtin``: the seven built-in tools (read, write, edit, list, find, grep,
  run_command);
- ``_executor``: ``ToolExecutor``, one tool call through validation, containment, the
  gate and per-effect retry.

May import: ``rules`` and ``providers._completion`` (a ``ToolCall`` is what the model
asked for). Knows nothing of the store, the run loop or the faces.
"""
