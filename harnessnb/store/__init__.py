"""The DuckDB store: the authoritative trace of every run, attempt, step and tool call.

- ``_store``: ``Store`` (writes in one transaction per step, DataFrame readers,
  ``failure_rates``, ``sql``);
- ``_schema``: tables, views and ordered migrations; ``_rows``: turning values into rows;
- ``_conn``: one shared connection per file, busy retry and the idle linger;
- ``_batch``: group commit of concurrent runs' step writes.

May import: ``rules``. Knows nothing of providers, tools, the run loop or the faces.
"""
