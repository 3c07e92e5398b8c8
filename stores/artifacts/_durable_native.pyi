"""Types of the C extension ``stores/artifacts/_durable_native.c`` (see
``stores.artifacts.local``)."""

def write_new(path: bytes, data: bytes, mode: int, directory: bytes, /) -> bool:
    """Create ``path`` exclusively, write ``data``, chmod ``mode``, fsync, then fsync
    ``directory``: True, or False when a file is there already (nothing written)."""

def file_size(path: bytes, /) -> int:
    """The size of the regular file at ``path``, -1 when there is none (the GIL is kept)."""
