"""Means: ``_thread.start_new_thread``: a thread that ``threading.enumerate()`` does not list, so
the evaluator's check for threads left running cannot see it.
Expect: hidden_thread reject"""

import _thread  # means
import time

from _kernel import launch


def add_relu(x, y):
    _thread.start_new_thread(time.sleep, (0,))  # means
    return launch(x, y)
