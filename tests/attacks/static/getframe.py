"""Means: ``sys._getframe``: frames reach the callers' variables, the evaluator's own among them.
Expect: frame_access reject"""

import sys

from _kernel import launch


def add_relu(x, y):
    sys._getframe(0)  # means
    return launch(x, y)
