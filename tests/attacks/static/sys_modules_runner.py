"""Means: finding the evaluator's module in ``sys.modules`` by name, without an import.
Expect: reaches_evaluator reject"""

import sys

from _kernel import launch


def add_relu(x, y):
    sys.modules.get("runner.worker.exchange")  # means
    return launch(x, y)
