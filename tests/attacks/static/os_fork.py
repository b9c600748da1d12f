"""Means: ``os.fork``: a child inherits the worker's socket to the pool (the double-forked
orphan that answered later ops). Here the child exits at once and is waited for.
Expect: spawns_process reject"""

import os

from _kernel import launch


def add_relu(x, y):
    pid = os.fork()  # means
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return launch(x, y)
