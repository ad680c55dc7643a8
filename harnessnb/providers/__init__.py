"""Model providers: everything that speaks to an LLM over HTTP, and nothing else.

- ``_http``: the one module that owns the HTTP client (httpx2), timeouts and the SSE reader;
- ``_wire``: what the wire-format parsers share (``Parsed``, stream assembly, ``WireError``);
- ``_completion``: ``Completion``, ``ToolCall``, ``Usage``, ``AttemptRecord``, the
  ``Provider`` protocol;
- ``_base``: ``BaseProvider``, the one ``complete`` every provider shares, and ``ask``;
- ``_openai`` (OpenAI, OpenRouter, any OpenAI-compatible server), ``_anthropic``;
- ``_fallback`` (``Fallback``), ``_scripted`` (``ScriptedProvider``, no network).

May import: ``rules``. Knows nothing of tools, the store, the run loop or the faces.
"""
