"""The embedded development stack: Temporal dev server, SeaweedFS, worker and API processes, the demo."""
