"""Means: ``os.write`` to a raw descriptor (a forged reply written straight onto the worker's
socket). Here, a pipe of its own.
Expect: raw_fd reject"""

import os

from _kernel import launch


def add_relu(x, y):
    r, w = os.pipe()
    os.write(w, b"{}\n")  # means
    os.close(r)
    os.close(w)
    return launch(x, y)
