"""Who may do what through the management operations: user tags, then resource permissions.

A caller is a user (None: an anonymous connection) acting in a virtual host. Reading
needs one of ``[management] read_tags``; changing things one of ``write_tags`` and the
user's RabbitMQ permission on the resource (configure to create or delete, read to
purge); seeing everyone's connections and every host ``monitor_tags``; closing another
user's connection or making a host ``admin_tags``; policies ``policy_tags``. A refusal
is a 401 for an anonymous caller (log in) and a 403 for a known one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core import Broker, ResourceKind, VirtualHost
from ..core.broker import Action
from .errors import Forbidden, NotFoundError, Unauthorized

if TYPE_CHECKING:  # the configuration is the layer above: management only reads it
    from ..config import ManagementConfig
    from ..oauth import TokenGrant

__all__ = ["Access", "Caller"]


@dataclass(frozen=True, kw_only=True)
class Caller:
    """Who asks: the authenticated user (None: anonymous) and the virtual host they act in."""

    user: str | None
    """The user name the connection (or web session) logged in as; None: anonymous."""
    vhost: str = "/"
    """The virtual host entities are named in (an AMQP connection's host)."""
    grant: TokenGrant | None = field(default=None, compare=False)
    """What the OAuth 2 token the caller came with allows (None: no token; the users file
    decides): its ``tag:`` scopes are its tags, its other scopes its permissions."""
    resources_only: bool = field(default=False, compare=False)
    """Checked on resource permissions only, never on the ``[management]`` tags: RabbitMQ 4's
    AMQP management (``/management``) asks no management tag of a user (its HTTP API and
    console do), only the configure, write and read permissions of what it touches."""


class Access:
    """The checks, on one broker's users and permissions and the ``[management]`` tags."""

    def __init__(self, broker: Broker, config: ManagementConfig) -> None:
        self.broker = broker
        self.config = config

    def has_any(self, caller: Caller, tags: Iterable[str]) -> bool:
        return any(self.broker.has_tag(caller.user, tag, grant=caller.grant) for tag in tags)

    def require(self, caller: Caller, tags: Iterable[str], what: str) -> None:
        """Raise 401/403 unless ``caller`` has one of ``tags``."""
        tags = list(tags)
        if caller.resources_only or self.has_any(caller, tags):
            return
        who = caller.user or "anonymous"
        needs = " or ".join(tags) or "(no tag is allowed)"
        if caller.user is None:
            raise Unauthorized(f"{what} needs a login with the {needs} tag")
        raise Forbidden(f"{what} needs the {needs} tag; user {who!r} has none of them")

    def can_read(self, caller: Caller, what: str) -> None:
        self.require(caller, self.config.read_tags, what)

    def can_write(self, caller: Caller, what: str) -> None:
        self.require(caller, self.config.write_tags, what)

    def monitors(self, caller: Caller) -> bool:
        """Whether ``caller`` sees every user's connections and every virtual host."""
        return self.has_any(caller, self.config.monitor_tags)

    def administers(self, caller: Caller) -> bool:
        return self.has_any(caller, self.config.admin_tags)

    def vhost(self, caller: Caller, name: str | None = None) -> VirtualHost:
        """The virtual host ``name`` (None: the caller's), if the caller may use it."""
        vhost_name = caller.vhost if name is None else name
        vhost = self.broker.vhost(vhost_name)
        if vhost is None:
            raise NotFoundError(f"no virtual host {vhost_name!r}")
        if not self.monitors(caller):
            refused = self.broker.vhost_denial(vhost, caller.user, grant=caller.grant)
            if refused is not None:
                raise Forbidden(refused)
        return vhost

    def visible_vhosts(self, caller: Caller) -> list[VirtualHost]:
        if self.monitors(caller):
            return list(self.broker.vhosts.values())
        return [v for v in self.broker.vhosts.values() if self.broker.vhost_denial(v, caller.user, grant=caller.grant) is None]

    def permission(self, caller: Caller, vhost: VirtualHost, name: str, kind: ResourceKind, action: Action) -> None:
        """Raise 403 unless the user's ``action`` permission covers ``name`` in ``vhost``."""
        refused = self.broker.denial(vhost, caller.user, name, kind, action, grant=caller.grant)
        if refused is not None:
            raise Forbidden(refused)
