"""Model providers: everything that speaks to an LLM over HTTP, and nothing else.

- ``_http``: ``HTTPProvider``: configuration, credentials, timeouts, streaming;
- ``_attempt``: one attempt at an endpoint: send, read, classify, time, report;
- ``_client``: the HTTP client (httpx2) per event loop, and the one ``post``;
- ``_wire``: what the wire-format parsers share (``Parsed``, stream assembly, ``WireError``);
- ``_usage``: what an answer that reported no usage is taken to have cost;
- ``_prices``: ``Prices``: an attempt's usage in dollars;
- ``_completion``: ``Completion``, ``ToolCall``, ``Usage``, ``AttemptRecord``, the
  ``Provider`` protocol;
- ``_base``: ``BaseProvider``, the one ``complete`` every provider shares, and ``ask``;
- ``_openai`` (OpenAI, OpenRouter, any OpenAI-compatible server), ``_anthropic``,
  ``_gemini`` (Google Gemini's own API);
- ``_responses``: OpenAI's Responses API wire format (``OpenAI(api="responses")``);
- ``_fallback`` (``Fallback``), ``_scripted`` (``ScriptedProvider``, no network).

May import: ``rules``. Knows nothing of tools, the store, the run loop or the faces.
"""
