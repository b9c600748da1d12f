"""Means: writing into ``builtins``: every module of the process, the evaluator's too, then sees
the candidate's object under that name.
Expect: object_internals reject"""

import builtins

from _kernel import launch


def add_relu(x, y):
    builtins.geak_static_means_marker = True  # means
    return launch(x, y)
