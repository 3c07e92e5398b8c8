"""Types of the C extension ``stores/artifacts/_durable_native.c`` (see
``stores.artifacts.local``)."""

def write_new(path: bytes, data: bytes, mode: int, directory: bytes, /) -> bool:
    """Create ``path`` exclusively, write ``data``, chmod ``mode``, fsync, then fsync
    ``directory``: True, or False when a file is there already (nothing written)."""
