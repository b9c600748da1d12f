"""Means: ``__import__`` of the evaluator's package, its name split in two so that no string in
the file reads "runner" (the check folds constant strings).
Expect: reaches_evaluator reject"""

from _kernel import launch


def add_relu(x, y):
    __import__("run" + "ner")  # means
    return launch(x, y)
