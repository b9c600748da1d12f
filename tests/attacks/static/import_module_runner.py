"""Means: ``importlib.import_module`` of the evaluator's module (the one that reports guard-band
breaches, ``Guarded.breach``).
Expect: reaches_evaluator reject"""

import importlib

from _kernel import launch


def add_relu(x, y):
    importlib.import_module("runner.worker.exchange")  # means
    return launch(x, y)
