"""Bearer tokens and roles.

Roles (``admin`` may do everything):

* ``viewer``: read runs (sanitized views), their verification, replays, incidents, reports;
* ``engineer``: what a viewer reads, plus start and cancel replays, open incidents, ingest runs;
* ``forensic``: what a viewer reads, plus confirm root causes, settle UNKNOWN side effects by
  hand and read raw evidence (``require_role(Role.FORENSIC)`` guards such endpoints);
* ``admin``: everything.

A token is compared in constant time and never logged; logs name a caller by the first 12 hex
digits of the token's SHA-256 (``caller``). A token may name whose it is (``TOKEN=ROLE@NAME``,
e.g. ``tokenA=forensic@alice``): the audit trail of raw reads records ``api:NAME``, or
``api:token:<fingerprint>`` for an unnamed token.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from models.errors import ConfigurationError


class Role(StrEnum):
    VIEWER = "viewer"
    ENGINEER = "engineer"
    FORENSIC = "forensic"
    ADMIN = "admin"


class Grant(frozenset[Role]):
    """The roles a token carries, and whose token it is when the entry names it (``@NAME``).
    Compares equal to the plain ``frozenset`` of its roles."""

    name: str | None

    def __new__(cls, roles: Iterable[Role] = (), name: str | None = None) -> Grant:
        grant = super().__new__(cls, roles)
        grant.name = name
        return grant


#: token → the roles it carries (a ``Grant`` when parsed from configuration)
TokenTable = dict[str, frozenset[Role]]

#: what each role may do besides reading
READ = (Role.VIEWER, Role.ENGINEER, Role.FORENSIC)
OPERATE = (Role.ENGINEER,)
FORENSIC = (Role.FORENSIC,)


@dataclass(frozen=True)
class Principal:
    caller: str
    roles: frozenset[Role]
    #: whose token it is, from ``TOKEN=ROLE@NAME``
    name: str | None = None

    @property
    def identity(self) -> str:
        """Who the audit trail says acted: ``api:NAME`` or ``api:token:<fingerprint>``."""
        return f"api:{self.name}" if self.name else f"api:token:{self.caller}"

    def may(self, allowed: Iterable[Role]) -> bool:
        return Role.ADMIN in self.roles or bool(self.roles & set(allowed))


def parse_tokens(text: str, source: str) -> TokenTable:
    """``TOKEN=ROLE[+ROLE…][@NAME]`` entries separated by commas or new lines; ``#`` starts a
    comment. Errors name the source and the entry's position, never the token itself."""
    tokens: TokenTable = {}
    entries = [e.strip() for line in text.splitlines() for e in line.split("#")[0].split(",")]
    for position, entry in enumerate((e for e in entries if e), start=1):
        token, sep, grant = entry.rpartition("=")
        token = token.strip()
        if not sep or not token:
            raise ConfigurationError(f"{source}: entry {position} is not TOKEN=ROLE")
        if any(c.isspace() for c in token):
            raise ConfigurationError(f"{source}: the token of entry {position} contains spaces")
        names, at, name = grant.partition("@")
        name = name.strip()
        if at and (not name or any(c.isspace() for c in name)):
            raise ConfigurationError(
                f"{source}: entry {position} names no one after '@' (TOKEN=ROLE@NAME, no spaces)"
            )
        roles = set()
        for role in names.split("+"):
            try:
                roles.add(Role(role.strip().lower()))
            except ValueError:
                raise ConfigurationError(
                    f"{source}: entry {position} has unknown role {role.strip()!r} "
                    f"(one of {', '.join(r.value for r in Role)})"
                ) from None
        previous = tokens.get(token, frozenset())
        earlier_name = getattr(previous, "name", None)
        if name and earlier_name and name != earlier_name:
            raise ConfigurationError(
                f"{source}: entry {position} names a token already given to {earlier_name!r}"
            )
        tokens[token] = Grant(frozenset(roles) | previous, name or earlier_name)
    return tokens


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:12]


bearer = HTTPBearer(auto_error=False, description="A token from REPLAYBOOK_API_TOKENS.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def authenticate(request: Request, credentials: Credentials) -> Principal:
    # a coroutine, as the dependencies below: a plain function would be run in the thread
    # pool, a thread hop on every request for a few microseconds of work
    offered = credentials.credentials if credentials is not None else None
    principal = principal_of(request.app.state.api.config, offered)
    if principal is not None:
        return principal
    raise HTTPException(
        401,
        "a bearer token is required (Authorization: Bearer TOKEN)"
        if credentials is None
        else "the bearer token is not valid",
        headers={"WWW-Authenticate": "Bearer"},
    )


def principal_of(config: Any, offered: str | None) -> Principal | None:
    """Who presents ``offered`` (a token from the Authorization header, or the web console's
    cookie) under ``config`` (an ``ApiConfig``); None when nobody does."""
    roles: frozenset[Role] | None = None
    if offered is not None:
        for token, token_roles in config.tokens.items():
            # compare with every token: timing says nothing about which one nearly matched
            if hmac.compare_digest(token.encode(), offered.encode()):
                roles = token_roles
        if roles is not None:
            return Principal(
                caller=fingerprint(offered), roles=roles, name=getattr(roles, "name", None)
            )
    if config.insecure_dev:
        return Principal(caller="insecure-dev", roles=frozenset({Role.ADMIN}))
    return None


def require_role(*allowed: Role) -> Callable[..., Awaitable[Principal]]:
    """A dependency that admits callers holding one of ``allowed`` (or ``admin``)."""

    async def dependency(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
        if not principal.may(allowed):
            names = " or ".join(r.value for r in (*allowed, Role.ADMIN))
            raise HTTPException(403, f"this needs the role {names}")
        return principal

    return dependency
