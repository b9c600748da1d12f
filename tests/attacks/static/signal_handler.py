"""Means: ``signal.signal``: a handler runs whenever the signal comes, in the middle of the
evaluator's own work. Installed and put back at once here.
Expect: signal_handler reject"""

import signal

from _kernel import launch


def _handler(signum, frame):
    pass


def add_relu(x, y):
    old = signal.signal(signal.SIGUSR2, _handler)  # means
    signal.signal(signal.SIGUSR2, old)  # means
    return launch(x, y)
