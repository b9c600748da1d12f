"""How to search for a better kernel: the GEAK loop, LLM providers, the no-LLM tuner, the CLI.

``optimize.optimize`` is the one entry every front end uses (the ``geak`` CLI in ``cli`` and
``commands``, the benchmark harness in ``bench``, the language server). Depends on ``runner``
only; never on ``geak_lsp``, and nothing here imports the CLI's modules.
"""
