"""Application operations, one module per use-case group: what the CLI and the HTTP API call."""
