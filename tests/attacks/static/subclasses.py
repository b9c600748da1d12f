"""Means: ``object.__subclasses__()``: every class the process has loaded, the evaluator's
included, reached without a name.
Expect: object_internals reject"""

from _kernel import launch


def add_relu(x, y):
    len(object.__subclasses__())  # means
    return launch(x, y)
