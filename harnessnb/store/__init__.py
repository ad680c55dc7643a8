"""The DuckDB store: the authoritative trace of every run, attempt, step and tool call.

- ``_store``: ``Store`` (runs each write now, ``submit``/``awrite`` queue it for group
  commit, ``store.queued`` awaits it from asyncio; DataFrame readers, ``sql``,
  ``failure_rates``, the reads resume needs);
- ``_writes``: every write, declared once as a function that builds a ``WriteOp``;
- ``_leases``: who drives a run: ``Lease``, ``LEASE_TTL_S``, owner identity and
  liveness, the statements on the ``leases`` table;
- ``_combine``: ``Store.combine`` (shard files read as one store) and ``Store.merge``;
- ``_open``: which store an entry point opens (``open_store``, ``default_store``:
  ``$HARNESSNB_STORE`` or ./runs.duckdb);
- ``_failures``: the SQL of ``failure_rates`` and its allowed groups;
- ``_batch``: ``WriteOp`` and group commit's merged statements;
- ``_conn``: one shared connection per file, busy retry, the idle linger, the writer
  thread;
- ``_threads``: the store's threads and the interpreter's exit;
- ``_files``: what a store path may be; ``_turn``: whose turn it is to open a file;
- ``_schema``: tables, views and ordered migrations; ``_rows``: turning values into rows;
- ``_frames``: query results as DataFrames in one convention.

May import: ``rules``. Knows nothing of providers, tools, the run loop or the faces.
"""
