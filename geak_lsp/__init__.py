"""The GEAK language server: "Optimize with GEAK" in any LSP editor (``geak-lsp``)."""

__version__ = "0.1.0"
