"""The runner daemon: ``geak-runner serve``.

A headless process on the GPU host that takes ``EvalRequest`` records over HTTP (or from a
spool directory on a shared file system), queues them durably in SQLite, evaluates them on one
worker pool per GPU and serves the ``EvalResult`` records back.

* ``store``     the durable job queue and results (stdlib ``sqlite3``)
* ``scheduler`` one lane (worker pool) per GPU; dispatcher threads claim jobs from the store
* ``server``    the HTTP API (aiohttp): auth, limits, validation, long-polled results
* ``spool``     request files in a shared directory, picked up with watchdog

Evaluating a request is running its code: whoever holds the daemon's token can run code on the
GPU host with the daemon's rights.
"""
