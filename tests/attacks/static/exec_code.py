"""Means: ``exec`` of a string (the attack ran the original's source, read at run time, as its
own). Here the string is harmless; what it says cannot be read when it is computed.
Expect: dynamic_code reject"""

from _kernel import launch


def add_relu(x, y):
    exec("_unused = 1", {})  # means
    return launch(x, y)
