"""Means: ``importlib.import_module`` of a module named by a string: kernel libraries load their
backends this way (Liger-Kernel), so it is a warning; "runner..." is a reject (import_module_runner.py).
Expect: dynamic_import warning"""

import importlib  # means

from _kernel import launch


def add_relu(x, y):
    importlib.import_module("math")  # means
    return launch(x, y)
