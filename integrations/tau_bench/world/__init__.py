"""The ``world`` replay of tau-bench runs: our own implementation of every domain tool over a
private copy of the domain database (see ``db``, ``airline``, ``retail``, ``replay``)."""
