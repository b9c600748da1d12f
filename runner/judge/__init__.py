"""What decides the verdict, in the pool's process, which never runs user or candidate code.

The fork server and its worker processes (``pool``, ``process``), the device lock (``locks``),
one evaluation's steps across the reference and candidate workers (``session``), and the verdict
and its anti-cheat rules (``verdict``). Imports nothing from ``runner.worker``: it talks to the
workers only through the pool's sockets and sealed shared memory.
"""
