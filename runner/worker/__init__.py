"""What runs inside the worker processes, next to user and candidate code.

Every module here is loaded in a sandboxed process (``runner.sandbox.confine``) that also runs
code the evaluator does not trust: the fork server (``zygote``), the worker's op loop (``main``),
the reference and candidate sides, the exchange of inputs and outputs, the guards, the timing.
Nothing here decides a verdict: a worker's reply is a claim that ``runner.judge`` checks. These
modules import nothing from ``runner.judge`` or ``runner.serve`` (tests/test_layering.py), and a
worker process has neither loaded (tests/test_sandbox.py).
"""
