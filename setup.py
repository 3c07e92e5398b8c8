"""Build hook for the two C extensions (everything else is in pyproject.toml):

* the canonical form's native path, ``models._canonical_native`` (``models/_canonical_native.c``);
  ``models.canonical.ACCELERATED`` says whether it is in use;
* a new local artifact's durable write in one call without the GIL,
  ``stores.artifacts._durable_native``; ``stores.artifacts.local.NATIVE_WRITES`` says so.

Both are ``optional``: where one cannot be compiled the install still succeeds and its module
uses a pure-Python path (the same bytes on disk, slower)."""

# setuptools ships no type stubs here (types-setuptools is not a dev dependency)
from setuptools import Extension, setup  # type: ignore[import-untyped]

setup(
    ext_modules=[
        Extension(
            "models._canonical_native",
            ["models/_canonical_native.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "stores.artifacts._durable_native",
            ["stores/artifacts/_durable_native.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
