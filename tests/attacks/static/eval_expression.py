"""Means: ``eval`` of an expression: real kernel code parses version strings this way
(FlagGems), so it is a warning, and the run decides.
Expect: dynamic_code warning"""

from _kernel import launch


def add_relu(x, y):
    eval("1 + 1")  # means
    return launch(x, y)
