"""Per user and virtual host permissions, with RabbitMQ's meaning; protocol-neutral.

Each user has, per virtual host, three regular expressions over resource names:

- ``configure``: declare and delete the resource (queue, exchange, 1.0 topic);
- ``write``: publish to it (an exchange, or a 1.0 node), bind *to* a queue;
- ``read``: consume from a queue, bind *from* an exchange, purge.

Matching is RabbitMQ's own (``rabbit_auth_backend_internal:check_resource_access``
runs ``re:run`` on the name): a pattern matches if it is found *anywhere* in the
name (``re.search``), so anchor it to mean a prefix or a whole name: ``^orders\\.``
allows ``orders.eu``, ``^orders$`` only ``orders``, and plain ``orders`` also
``my-orders``. A definitions file exported from RabbitMQ therefore means here what it
meant there. The empty pattern ``""`` matches nothing (RabbitMQ reads it as ``^$``,
and no checked name is empty), and the nameless default exchange is checked under
the name ``amq.default``. A user with no entry for a virtual host may not use that
virtual host at all. Patterns are Python regular expressions, which agree with
RabbitMQ's PCRE on everything but exotic syntax.

A :class:`PermissionChecker` compiles each (user, vhost) entry once, on first use,
and keeps a bounded cache of recent answers, so a check is a dict lookup (and, the
first time a name is seen, one precompiled ``search``). A refusal raises
:class:`PermissionDenied`, which carries the error each protocol reports:
``amqp:unauthorized-access`` on 1.0, ``ACCESS_REFUSED`` (403) on 0-9-1. It is logged
at warning level with the user, vhost, action and resource.

This module imports no protocol engine: front ends catch :class:`PermissionDenied`
and turn its ``condition`` / ``reply_code`` into their own frames.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final, Literal, get_args

__all__ = [
    "ACTIONS",
    "ANONYMOUS",
    "DEFAULT_EXCHANGE_NAME",
    "DEFAULT_VHOST",
    "FULL_ACCESS",
    "KNOWN_TAGS",
    "NO_ACCESS",
    "Action",
    "PermissionChecker",
    "PermissionDenied",
    "ResourceKind",
    "VhostAccessDenied",
    "VhostPermissions",
    "check_pattern",
    "check_tags",
]

log = logging.getLogger("amqp10.broker.permissions")

Action = Literal["configure", "write", "read"]
"""RabbitMQ's three permissions: declare/delete, publish, consume/bind from."""

ResourceKind = Literal["queue", "exchange", "topic"]
"""What a name names: a queue (streams are queues), an exchange, or a 1.0 topic node
(an exchange underneath)."""

ACTIONS: Final[tuple[Action, ...]] = get_args(Action)

KNOWN_TAGS: Final[frozenset[str]] = frozenset(
    {"administrator", "management", "monitoring", "policymaker", "impersonator"}
)
"""User tags with a meaning (RabbitMQ's): who may use the management operations."""

DEFAULT_VHOST: Final = "/"

DEFAULT_EXCHANGE_NAME: Final = "amq.default"
"""The name under which the nameless default exchange is checked (as RabbitMQ does)."""

ANONYMOUS: Final = "anonymous"
"""How logs and messages name a connection without an identity."""

_CACHE_SIZE: Final = 1024
"""Answers remembered per (user, vhost); the cache is simply cleared when full."""


def check_pattern(pattern: str) -> str:
    """Return ``pattern`` if it compiles as a regular expression; else raise ValueError."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
    return pattern


def check_tags(tags: object) -> tuple[str, ...]:
    """Normalise tags (a list, or RabbitMQ's comma-separated string) and refuse unknown ones."""
    if isinstance(tags, str):
        items = [t.strip() for t in tags.split(",")]
    elif isinstance(tags, list | tuple):
        items = [str(t).strip() for t in tags]
    else:
        raise ValueError("tags must be a list of names or a comma-separated string")
    names = tuple(dict.fromkeys(t for t in items if t))
    bad = [t for t in names if t not in KNOWN_TAGS]
    if bad:
        raise ValueError(f"unknown tag(s) {', '.join(bad)}; known: {', '.join(sorted(KNOWN_TAGS))}")
    return names


@dataclass(frozen=True, slots=True)
class VhostPermissions:
    """One user's three patterns for one virtual host (RabbitMQ's ``set_permissions``)."""

    configure: str
    write: str
    read: str

    def __post_init__(self) -> None:
        for action in ACTIONS:
            check_pattern(getattr(self, action))

    def pattern(self, action: Action) -> str:
        """The pattern for ``action``."""
        pattern: str = getattr(self, action)
        return pattern


FULL_ACCESS: Final = VhostPermissions(".*", ".*", ".*")
"""Everything (RabbitMQ's default user on ``/``; users of a users file without permissions)."""

NO_ACCESS: Final = VhostPermissions("", "", "")
"""Access to the virtual host, but to no resource in it."""


class PermissionDenied(Exception):
    """A user may not do an action on a resource; ``str()`` is one line for logs and peers."""

    condition: ClassVar[str] = "amqp:unauthorized-access"
    """The AMQP 1.0 error condition a front end reports (on the link, or the connection)."""
    reply_code: ClassVar[int] = 403
    """The 0-9-1 reply code (``ACCESS_REFUSED``, a channel exception)."""
    reply_text: ClassVar[str] = "ACCESS_REFUSED"

    def __init__(
        self,
        message: str,
        *,
        user: str | None,
        vhost: str,
        action: Action | None = None,
        kind: ResourceKind | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.user = user
        self.vhost = vhost
        self.action = action
        self.kind = kind
        self.name = name


class VhostAccessDenied(PermissionDenied):
    """A user may not use a virtual host at all (no permission entry for it)."""

    reply_code: ClassVar[int] = 530
    """0-9-1 refuses ``connection.open`` with ``NOT_ALLOWED`` (a connection exception)."""
    reply_text: ClassVar[str] = "NOT_ALLOWED"


@dataclass(slots=True)
class _Compiled:
    """One (user, vhost) entry, compiled: a precompiled pattern per action, None for ``""``."""

    patterns: dict[Action, re.Pattern[str] | None]
    cache: dict[tuple[Action, str], bool] = field(default_factory=dict)

    @classmethod
    def of(cls, perms: VhostPermissions) -> _Compiled:
        patterns: dict[Action, re.Pattern[str] | None] = {}
        for action in ACTIONS:
            text = perms.pattern(action)
            patterns[action] = re.compile(text) if text else None
        return cls(patterns)

    def allows(self, action: Action, name: str) -> bool:
        key = (action, name)
        answer = self.cache.get(key)
        if answer is None:
            pattern = self.patterns[action]
            answer = pattern is not None and pattern.search(name) is not None
            if len(self.cache) >= _CACHE_SIZE:
                self.cache.clear()
            self.cache[key] = answer
        return answer


class PermissionChecker:
    """Answers "may this user do that here?" from a table ``{user: {vhost: VhostPermissions}}``
    and the users' tags.

    ``user`` None is an anonymous connection: it is checked as ``anonymous_user`` when
    one is given (a user of the table; absent from it means no access), and otherwise
    has full access to ``/`` and nothing else, and every tag (what every connection
    had before permissions existed). :meth:`allow_all` is a checker that refuses
    nothing (a broker without a users file).
    """

    def __init__(
        self,
        table: Mapping[str, Mapping[str, VhostPermissions]],
        *,
        tags: Mapping[str, Iterable[str]] | None = None,
        anonymous_user: str | None = None,
    ) -> None:
        self._allow_all = False
        self._compiled: dict[tuple[str | None, str], _Compiled] = {}
        self.update(table, tags=tags, anonymous_user=anonymous_user)

    @classmethod
    def allow_all(cls) -> PermissionChecker:
        """A checker that allows every user everything in every virtual host."""
        checker = cls({})
        checker._allow_all = True
        return checker

    @property
    def allows_all(self) -> bool:
        """Whether it is :meth:`allow_all`'s checker (it refuses nothing, whatever
        :meth:`update` gives it): a front end need not ask it per publish."""
        return self._allow_all

    def update(
        self,
        table: Mapping[str, Mapping[str, VhostPermissions]],
        *,
        tags: Mapping[str, Iterable[str]] | None = None,
        anonymous_user: str | None = None,
    ) -> None:
        """Replace table, tags and anonymous user (e.g. after the users file changed)."""
        self._table = {user: dict(vhosts) for user, vhosts in table.items()}
        self._tags = {user: frozenset(t) for user, t in (tags or {}).items()}
        self.anonymous_user = anonymous_user
        self._compiled.clear()

    def _entry(self, user: str | None, vhost: str) -> _Compiled | None:
        entry = self._compiled.get((user, vhost))
        if entry is None:
            # Only entries that exist are kept: names a client makes up (a vhost in its
            # open frame) must not grow this dict.
            perms: VhostPermissions | None
            if user is None and self.anonymous_user is None:
                perms = FULL_ACCESS if vhost == DEFAULT_VHOST else None
            else:
                name = self.anonymous_user if user is None else user
                perms = self._table.get(name or "", {}).get(vhost)
            if perms is None:
                return None
            entry = self._compiled[user, vhost] = _Compiled.of(perms)
        return entry

    def _who(self, user: str | None) -> str:
        if user is None:
            if self.anonymous_user is None:
                return ANONYMOUS
            return f"{ANONYMOUS} ({self.anonymous_user})"
        return user

    # -- questions (never raise, never log) ------------------------------------------------
    def vhost_access(self, user: str | None, vhost: str) -> bool:
        """Whether ``user`` may use ``vhost`` at all (has a permission entry for it)."""
        return self._allow_all or self._entry(user, vhost) is not None

    def allowed(
        self, user: str | None, vhost: str, action: Action, kind: ResourceKind, name: str
    ) -> bool:
        """Whether ``user`` may do ``action`` on the resource."""
        if self._allow_all:
            return True
        entry = self._entry(user, vhost)
        if entry is None:
            return False
        if kind != "queue" and not name:
            name = DEFAULT_EXCHANGE_NAME
        return entry.allows(action, name)

    def has_tag(self, user: str | None, tag: str) -> bool:
        """Whether ``user`` has ``tag`` (e.g. "administrator" for management operations)."""
        if self._allow_all or (user is None and self.anonymous_user is None):
            return True
        name = self.anonymous_user if user is None else user
        return tag in self._tags.get(name or "", ())

    # -- checks (log a refusal) ------------------------------------------------------------
    def vhost_denial(self, user: str | None, vhost: str) -> VhostAccessDenied | None:
        """None if ``user`` may use ``vhost``; else the refusal (logged), to raise or report."""
        if self.vhost_access(user, vhost):
            return None
        message = f"access to vhost {vhost!r} refused for user {self._who(user)!r}"
        log.warning("permission denied: %s", message)
        return VhostAccessDenied(message, user=user, vhost=vhost)

    def denial(
        self, user: str | None, vhost: str, action: Action, kind: ResourceKind, name: str
    ) -> PermissionDenied | None:
        """None if ``user`` may do ``action`` on the resource; else the refusal (logged).

        For callers that answer with a value rather than an exception (a front end's
        ``authorize`` hook): the refusal's ``str()``, ``condition`` and ``reply_code``
        are what goes to the peer. The default exchange (``name`` "" for an exchange or
        topic) is named ``amq.default``.
        """
        if self.allowed(user, vhost, action, kind, name):
            return None
        refused = self.vhost_denial(user, vhost)
        if refused is not None:
            return refused
        shown = name if name or kind == "queue" else DEFAULT_EXCHANGE_NAME
        message = (
            f"{action} access to {kind} {shown!r} in vhost {vhost!r}"
            f" refused for user {self._who(user)!r}"
        )
        log.warning("permission denied: %s", message)
        return PermissionDenied(
            message, user=user, vhost=vhost, action=action, kind=kind, name=shown
        )

    def check_vhost_access(self, user: str | None, vhost: str) -> None:
        """Raise :class:`VhostAccessDenied` (and log it) unless ``user`` may use ``vhost``."""
        refused = self.vhost_denial(user, vhost)
        if refused is not None:
            raise refused

    def check(
        self, user: str | None, vhost: str, action: Action, kind: ResourceKind, name: str
    ) -> None:
        """Raise :class:`PermissionDenied` (and log it) unless ``user`` may do ``action``
        (:class:`VhostAccessDenied` if the user may not use ``vhost`` at all)."""
        refused = self.denial(user, vhost, action, kind, name)
        if refused is not None:
            raise refused
