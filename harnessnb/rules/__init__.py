"""The pure rules: decisions with no I/O, each tested table by table without sleeping.

- ``_errors``: the ``HarnessError`` tree, ``ProviderErrorKind`` and ``StoreErrorKind``,
  ``.retryable`` (the one spelling of "may a retry help"), the one status/body/header
  -> kind table and the one ``Retry-After`` parser;
- ``_html``: every card's HTML: escaping (once, there), badges, key/value tables,
  the card frame and the colour palette;
- ``_text``: ``shorten``, the one rule for cutting text to a length;
- ``_retry``: the backoff rule and the deadline check ("never sleep past the budget");
- ``_stall``: the stall detector (window and bare repetition) and the replan text;
- ``_policy``: layered permission rules and their verdict {effect, rule, layer};
- ``_renamed``: old public spellings kept one release, each warning with its new name.

May import: the standard library only (time and randomness come in as arguments).
Everything else in harnessnb may import this package.
"""
