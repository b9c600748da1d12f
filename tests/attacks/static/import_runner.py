"""Means: importing the evaluator's own package, ``from runner import channel`` (the attack
that replaced ``runner.channel.send``).
Expect: reaches_evaluator reject"""

from _kernel import launch
from runner import channel  # means


def add_relu(x, y):
    channel.current_phase()
    return launch(x, y)
