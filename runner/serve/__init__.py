"""What serves clients: the runners a caller opens and the daemon that serves remote ones.

``runners`` (the ``Runner`` protocol, ``open_runner``), ``local`` (a worker pool in this
process), ``remote`` (the daemon's HTTP and spool clients), ``ray`` (a Ray cluster's actors),
``cli`` (``geak-runner``) and ``daemon/`` (``geak-runner serve``). Imports nothing from
``runner.worker``.
"""
