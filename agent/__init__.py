"""How to search for a better kernel: the GEAK loop, LLM providers, the no-LLM tuner, the CLI.

Depends on ``runner`` only; never on ``geak_lsp``.
"""
