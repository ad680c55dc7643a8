"""The pure rules: decisions with no I/O, each tested table by table without sleeping.

- ``_classify``: ``ProviderErrorKind`` and the one status/body -> kind table;
- ``_headers``: the one ``Retry-After`` parser, ``x-should-retry``, the request id;
- ``_errors``: the ``HarnessError`` tree (``MCPError`` and ``MCPErrorKind`` in it),
  ``StoreErrorKind``, ``.retryable`` (the one spelling of "may a retry help"); it
  re-exports ``_classify``'s and ``_headers``' names;
- ``_phrases``: failure phrases as data, (kind, pattern) rows read by one ``Phrases``;
- ``_fields``: an error's context fields declared once (``Declared``);
- ``_error_pickle``: an error's cause chain, and an error pickled across processes;
- ``_html``: every card's HTML: escaping (once, there), badges, key/value tables,
  the card frame and the colour palette;
- ``_text``: ``shorten``, ``clip`` and ``printable``: text cut and shown safely;
- ``_secrets``: the one scrubber; ``_secret_files``: the secrets layer's table;
- ``_retry``: the backoff rule and the deadline check ("never sleep past the budget");
- ``_stall``: the stall detector (window and bare repetition) and the replan text;
- ``_policy``: layered permission rules and their verdict {effect, rule, layer};
  ``_rule``: one rule and how its pattern matches; ``_exec``: what an argv will run;
- ``_outcomes``: ``RunOutcome``, how a run ends;
- ``_events``: the run events as values, one frozen class per kind (the gate, the
  loop and the agent CLIs emit them; ``harnessnb.events`` is their public path);
- ``_renamed``: old public spellings kept one release, each warning with its new name.

May import: the standard library only (time and randomness come in as arguments).
Everything else in harnessnb may import this package.
"""
