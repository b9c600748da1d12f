"""Means: ``subprocess``: running another program has real uses (a compiler, nvidia-smi), so it
is a warning; processes it leaves behind are rejected at run time (background_process).
Expect: runs_program warning"""

import subprocess
import sys

from _kernel import launch

_ran = []


def add_relu(x, y):
    if not _ran:
        _ran.append(subprocess.run([sys.executable, "-c", "pass"], check=False).returncode)  # means
    return launch(x, y)
