"""Means: reading a Python source from disk, the original's (``ref.py``) here, to run or copy it.
Expect: reads_source reject"""

import os

from _kernel import launch


def add_relu(x, y):
    try:
        with open(os.path.join(os.path.dirname(__file__), "ref.py")) as f:  # means
            f.read()
    except OSError:
        pass
    return launch(x, y)
