"""How code runs on a device: evaluate a candidate against a reference, safely.

Never imports ``agent`` or ``geak_lsp``. The worker side needs only the standard library,
torch, triton and numpy; this package's top level imports none of them.
"""

from .schema import SCHEMA, EvalOptions, EvalRequest, EvalResult, Target  # noqa: F401
