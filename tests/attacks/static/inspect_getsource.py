"""Means: ``inspect.getsource``, source read at run time.
Expect: reads_source reject"""

import inspect

from _kernel import launch


def add_relu(x, y):
    try:
        inspect.getsource(launch)  # means
    except (OSError, TypeError):
        pass
    return launch(x, y)
