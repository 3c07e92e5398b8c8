"""Build hook for the one C extension (everything else is in pyproject.toml): the canonical form's
native path, ``models._canonical_native`` (``models/_canonical_native.c``). ``optional``: where it
cannot be compiled the install still succeeds and ``models.canonical`` uses its pure-Python
path (same bytes, slower; ``models.canonical.ACCELERATED`` says which is in use)."""

# setuptools ships no type stubs here (types-setuptools is not a dev dependency)
from setuptools import Extension, setup  # type: ignore[import-untyped]

setup(
    ext_modules=[
        Extension(
            "models._canonical_native",
            ["models/_canonical_native.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
