"""Means: ``gc.get_referrers``, how a candidate finds the evaluator's records and answers among
the interpreter's objects.
Expect: heap_walk reject"""

import gc

from _kernel import launch


def add_relu(x, y):
    gc.get_referrers(x)  # means
    return launch(x, y)
