"""Means: importing the evaluator's own package, ``from runner import channel`` (the attack
that replaced ``runner.worker.channel.send``).
Expect: reaches_evaluator reject"""

from _kernel import launch
from runner.worker import channel  # means


def add_relu(x, y):
    channel.current_phase()
    return launch(x, y)
