"""The GEAK loop with LLM providers: generate -> evaluate -> reflect -> optimize.

One small module per piece: ``providers`` (OpenAI / Anthropic SDKs), ``usage`` (tokens and
budget), ``extract`` (code out of model answers), ``retrieval`` (one-shot example by code
similarity), ``knowledge`` (per-architecture packs), ``prompts`` (templates in agent/prompts/),
``generator`` / ``reflector`` (what goes into each prompt), ``ranking`` (the paper's optimizer: which candidates the next prompt shows, which one is chosen), ``rundir`` (what
each run writes, and resume), ``loop`` (the loop itself) and ``session`` (one run of it, wired
once for the CLI, the benchmark harness and the language server).
"""
