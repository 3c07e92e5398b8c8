"""The ``replaybook`` command line (Typer): one module per command group, assembled in ``cli.main``."""
