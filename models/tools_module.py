"""The pin of a team's tools module (issue 32, item 3): which read-only tool implementations
answered a replay's fixture misses under ``sandbox-live``. It travels in the replay plan and
the incident request (small: a name and a hash) and is recorded in the replay manifest."""

from __future__ import annotations

from pydantic import Field

from models.base import Record
from models.digest import Digest

#: the entry-point group a distribution registers its tools module under
ENTRY_POINT_GROUP = "replaybook.tools"
#: the module attribute that holds the tools mapping, unless ``module:attribute`` names another
DEFAULT_ATTRIBUTE = "REPLAYBOOK_TOOLS"


class ToolsModulePin(Record):
    """A tools module as it was when the replay was planned: a replay whose worker finds other
    source files under that name refuses to call it."""

    #: ``package.module`` or ``package.module:ATTRIBUTE``
    module: str = Field(min_length=1, max_length=512)
    #: SHA-256 over the module's source files (a package: every ``.py`` under it), by path
    digest: Digest
    #: the distribution that provides it and its version (``acme-agent 1.4.0``), when one does
    distribution: str | None = None
    #: the ``replaybook.tools`` entry-point name it was chosen by, when it was
    entry_point: str | None = None
    #: the names of the tools it declares READ (the only ones a replay may call)
    read_tools: tuple[str, ...] = ()

    @property
    def module_name(self) -> str:
        return self.module.partition(":")[0]

    @property
    def attribute(self) -> str:
        return self.module.partition(":")[2] or DEFAULT_ATTRIBUTE

    def label(self) -> str:
        """``module@sha256:… (distribution)``: how a report names it."""
        shown = f"{self.module}@{self.digest}"
        return f"{shown} ({self.distribution})" if self.distribution else shown
