"""Sweeps: many runs of tasks across providers, tagged with one id, and what they come to.

- ``_sweep``: ``hn.sweep``/``sweep_sync``; ``_sweep_run``: one run of a sweep in its own
  copy of the workspace; ``_sweep_dask``: a sweep on a Dask cluster (the client's side);
  ``_sweep_worker``: its runs on a Dask worker, in chunks, in the process's shard;
  ``_sweep_result``: ``SweepResult`` and ``SweepRun``; ``_sample``: ``Sample``, ``Score``,
  the ``Scorer`` type and the outcomes that are infrastructure failures (never scored);
  ``_samples_io``: ``hn.samples``, samples from a CSV or JSONL file, a DataFrame or dicts;
  ``_scorers``: the built-in scorers (``hn.scorers``);
  ``_judge``: the LLM judge scorer (``hn.scorers.model_graded``), recorded and replayed;
  ``_stats``: what the scores come to (``summary``, ``compare``, pass@k and pass^k);
  ``_grid``: the sweep's grid (samples x providers, each cell opening to transcripts);
  ``_rescore``: ``hn.rescore``, a sweep's kept runs scored again, and what a resumed
  sweep reads back.

May import: ``loop``, ``tools``, ``providers``, ``store``, ``rules``. Never a face (cli,
notebook), nor ``agents`` or ``demo``.
"""
