"""Model providers: implementations of ``runtime.ports.ModelProvider``."""
