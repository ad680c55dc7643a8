"""The DuckDB store: the authoritative trace of every run, attempt, step and tool call.

- ``_store``: ``Store``, the reader users see (DataFrame readers, ``get_run``,
  ``checkpoints``, ``sql``, ``failure_rates``, ``combine``, ``merge``);
- ``_writer``: ``StoreWriter`` (``store_writer(store)``), the loop's side: each write
  run now, ``submit``/``awrite`` queue it for group commit, ``queued`` awaits it from
  asyncio; the reads resume needs;
- ``_writes``: every write, declared once as a function that builds a ``WriteOp``;
- ``_leases``: who drives a run: ``Lease``, ``LEASE_TTL_S``, owner identity and
  liveness, the statements on the ``leases`` table;
- ``_combine``: ``Store.combine`` (shard files read as one store) and ``Store.merge``;
- ``_open``: which store an entry point opens, for every face (``open_store``, kept
  per file with ``keep=True``; ``default_store``: ``$HARNESSNB_STORE`` or ./runs.duckdb);
- ``_failures``: the SQL of ``failure_rates`` and its allowed groups;
- ``_batch``: ``WriteOp`` and group commit's merged statements; the leases the
  connection knows current (no lease statement per step);
- ``_conn``: one shared connection per file, busy retry, the idle linger, the writer
  thread;
- ``_journal``: the step journal: a step's record in one statement, its attempt and
  tool-call rows settled into their tables in batches, recovered after a crash;
- ``_threads``: the store's threads and the interpreter's exit; ``_interrupt``: a
  Ctrl-C during a query on the main thread ends the query at once;
- ``_files``: what a store path may be, driver errors typed; ``_turn``: whose turn it
  is to open a file;
- ``_schema``: tables, views and ordered migrations; ``_row_types``: the typed row
  each write takes, one per table; ``_rows``: turning values into rows (an unknown or
  missing column refused, named);
- ``_frames``: query results as DataFrames in one convention;
- ``_traces``: OpenTelemetry spans of a stored run (``export_run``, ``sweep_span``,
  ``Store.export_traces``), from its rows (``_trace_rows``) and the attribute tables
  (``_trace_attrs``); ``opentelemetry`` (the ``otel`` extra) imported on use only.

May import: ``rules``, and ``opentelemetry`` inside ``_traces``' functions. Knows
nothing of providers, tools, the run loop or the faces.
"""
