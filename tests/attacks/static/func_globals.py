"""Means: a function's ``__globals__``: the module namespace of whoever defined it (a wrapper the
evaluator installed on Triton's launcher leads to the evaluator's module).
Expect: object_internals reject"""

from _kernel import launch


def add_relu(x, y):
    launch.__globals__.get("torch")  # means
    return launch(x, y)
