"""Means: ``sys.settrace``: a trace function runs inside every call the evaluator makes after it.
Here the current one (none) is set again.
Expect: tracing_hook reject"""

import sys

from _kernel import launch


def add_relu(x, y):
    sys.settrace(sys.gettrace())  # means
    return launch(x, y)
