"""Means: ``ctypes.memmove``, a raw memory write (here into a buffer of its own; pointed at an
object's address it rewrites the evaluator's records in place).
Expect: raw_memory reject"""

import ctypes

from _kernel import launch

_buf = ctypes.create_string_buffer(8)


def add_relu(x, y):
    ctypes.memmove(_buf, b"geak", 4)  # means
    return launch(x, y)
