"""Definitions on a running broker: the core as a :class:`~.definitions.Topology`, and
import/export of whole documents (the ``definitions_file`` at start, the
``$management`` operations ``export-definitions`` and ``import-definitions``).

:class:`BrokerTopology` lists and declares through the core's virtual hosts. Its
listings leave out what RabbitMQ's exports leave out and what a definitions file
cannot recreate: the default exchange and the predeclared ``amq.*`` exchanges,
exclusive queues, dynamic nodes, and this broker's 1.0 topics with their
subscription queues (declared by 1.0 clients or the config, not by definitions).

:class:`LiveDefinitions` adds the users file: imported users and permissions are
written to it (and the service told, so that logins and permission checks use them
at once); a broker without a users file reports them as not imported.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .core import (
    DEFAULT_EXCHANGE,
    PREDECLARED,
    Broker,
    Exchange,
    ModelError,
    Queue,
    RuntimePolicy,
    Stream,
    Topic,
    VirtualHost,
)
from .core.arguments import QUEUE_TYPES
from .definitions import (
    BindingDef,
    Definitions,
    DefinitionsError,
    DefinitionsWarning,
    ExchangeDef,
    ImportReport,
    PolicyDef,
    QueueDef,
    VhostDef,
    dump_definitions,
    entry_arguments,
    export_definitions,
    exported_arguments,
    import_definitions,
    load_definitions,
    parse_definitions,
)
from .permissions import VhostPermissions, check_tags
from .users import (
    User,
    UsersFile,
    UsersFileError,
    read_users_file,
    scram_credentials,
    update_users_file,
    write_users_file,
)

__all__ = ["BrokerTopology", "ImportOutcome", "LiveDefinitions"]

log = logging.getLogger("amqp10.broker")

T = TypeVar("T")


def _listed_exchange(x: Exchange) -> bool:
    return not (x.name == DEFAULT_EXCHANGE or x.name in PREDECLARED or x.name.startswith("amq.") or isinstance(x, Topic))


def _listed_queue(node: object) -> bool:
    if isinstance(node, Queue):
        return node.owner is None and not node.dynamic
    return isinstance(node, Stream)


class BrokerTopology:
    """The broker core as a :class:`~amqp10.broker.definitions.Topology`."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _vhost(self, name: str) -> VirtualHost:
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise ValueError(f"no vhost {name!r}")
        return vhost

    # -- listings -----------------------------------------------------------------------
    def list_vhosts(self) -> list[VhostDef]:
        return [VhostDef(name=v.name, **v.metadata).canonical() for v in self.broker.vhosts.values()]

    def list_exchanges(self, vhost: str) -> list[ExchangeDef]:
        out = []
        for x in self._vhost(vhost).exchanges.values():
            if not _listed_exchange(x):
                continue
            arguments = dict(x.arguments)
            if x.alternate is not None:
                arguments.setdefault("alternate-exchange", x.alternate)
            plain, kept = exported_arguments(arguments)
            out.append(
                ExchangeDef(
                    vhost=vhost,
                    name=x.name,
                    type=x.type,
                    durable=x.durable,
                    auto_delete=x.auto_delete,
                    internal=x.internal,
                    arguments=plain,
                    amqp10_arguments=kept,
                )
            )
        return out

    def list_queues(self, vhost: str) -> list[QueueDef]:
        v = self._vhost(vhost)
        out = []
        for node in v.nodes.values():
            if isinstance(node, Queue) and _listed_queue(node):
                plain, kept = exported_arguments(node.arguments)
                out.append(
                    QueueDef(
                        vhost=vhost,
                        name=node.name,
                        type="quorum" if node.arguments.get("x-queue-type") == "quorum" else "classic",
                        durable=node.durable_node,
                        auto_delete=node.auto_delete,
                        arguments=plain,
                        amqp10_arguments=kept,
                    )
                )
            elif isinstance(node, Stream):
                plain, kept = exported_arguments(v.stream_arguments.get(node.name, {}))
                out.append(QueueDef(vhost=vhost, name=node.name, type="stream", arguments=plain, amqp10_arguments=kept))
        return out

    def list_bindings(self, vhost: str) -> list[BindingDef]:
        out = []
        for x in self._vhost(vhost).exchanges.values():
            if not _listed_exchange(x):
                continue
            for b in x.bindings.values():
                d = b.destination
                if (isinstance(d, Exchange) and _listed_exchange(d)) or _listed_queue(d):
                    plain, kept = exported_arguments(b.arguments)
                    out.append(
                        BindingDef(
                            vhost=vhost,
                            source=x.name,
                            destination=d.name,
                            destination_type="exchange" if isinstance(d, Exchange) else "queue",
                            routing_key=b.key,
                            arguments=plain,
                            amqp10_arguments=kept,
                        )
                    )
        return out

    def list_policies(self, vhost: str) -> list[PolicyDef]:
        return [
            PolicyDef.model_validate(
                {
                    "vhost": vhost,
                    "name": p.name,
                    "pattern": p.pattern,
                    "apply-to": p.apply_to,
                    "definition": dict(p.definition),
                    "priority": p.priority,
                }
            )
            for p in self._vhost(vhost).policies.values()
        ]

    # -- declarations ---------------------------------------------------------------------
    def declare_vhost(self, vhost: VhostDef) -> None:
        c = vhost.canonical()
        if c.default_queue_type is not None and c.default_queue_type not in QUEUE_TYPES:  # (before it is made)
            raise ValueError(f"invalid_queue_type: default queue type {c.default_queue_type!r} (classic, quorum or stream)")
        metadata = {"description": c.description, "tags": c.tags, "default_queue_type": c.default_queue_type}
        self.broker.add_vhost(vhost.name).set_metadata({k: v for k, v in metadata.items() if v})

    def declare_exchange(self, exchange: ExchangeDef) -> None:
        x = self._vhost(exchange.vhost).declare_exchange(
            exchange.name,
            exchange.type,
            durable=exchange.durable,
            auto_delete=exchange.auto_delete,
            internal=exchange.internal,
            arguments=entry_arguments(exchange.arguments, exchange.amqp10_arguments),
        )
        if isinstance(x, Topic):
            raise ValueError(f"{exchange.name!r} in vhost {exchange.vhost!r} is a 1.0 topic")

    def declare_queue(self, queue: QueueDef) -> None:
        # unsupported arguments and types were reported when the document was read; the
        # core keeps the arguments it gives no meaning to, as RabbitMQ does
        arguments = entry_arguments(queue.arguments, queue.amqp10_arguments)
        qtype = arguments.get("x-queue-type") or queue.type or "classic"
        if arguments.get("x-queue-type") not in (None, *QUEUE_TYPES):
            del arguments["x-queue-type"]
        elif "x-queue-type" not in arguments and qtype in ("quorum", "stream"):
            arguments["x-queue-type"] = qtype  # (a file that gives the type alone: as declared with it)
        self._vhost(queue.vhost).declare_queue(
            queue.name,
            durable=queue.durable,
            kind=QUEUE_TYPES.get(str(qtype), "queue"),
            arguments=arguments,
            auto_delete=queue.auto_delete,
        )

    def declare_binding(self, binding: BindingDef) -> None:
        self._vhost(binding.vhost).bind(
            binding.source,
            binding.destination,
            binding.routing_key,
            entry_arguments(binding.arguments, binding.amqp10_arguments),
            destination_kind=binding.destination_type,
        )

    def declare_policy(self, policy: PolicyDef) -> None:
        self._vhost(policy.vhost).declare_policy(
            RuntimePolicy(policy.name, policy.pattern, policy.apply_to, dict(policy.definition), policy.priority)
        )


class ImportOutcome:
    """What an import into the running broker did: counts, warnings, skipped entries."""

    def __init__(self, report: ImportReport, warnings: list[DefinitionsWarning]) -> None:
        self.report = report
        self.warnings = [str(w) for w in warnings]

    def body(self) -> dict[str, Any]:
        """The ``import-definitions`` reply: ``imported`` (counts), ``warnings``, ``skipped``."""
        return {"imported": dict(self.report.counts), "warnings": self.warnings, "skipped": list(self.report.errors)}

    def log(self, source: str) -> None:
        """One log line per warning and per skipped entry, then a summary."""
        for w in self.warnings:
            log.warning("definitions %s: %s", source, w)
        for e in self.report.errors:
            log.warning("definitions %s: skipped %s", source, e)
        log.info("definitions %s: imported %s", source, self.report.summary())


class LiveDefinitions:
    """Definitions import and export on a running broker (a
    :class:`~amqp10.broker.core.DefinitionsPort`).

    ``users_file``: where users and permissions go (None: the broker has none, and
    they are reported as not imported); ``on_users_changed`` is called with the new
    users after an import wrote them.
    """

    def __init__(
        self,
        broker: Broker,
        users_file: Path | None = None,
        on_users_changed: Callable[[UsersFile], None] | None = None,
    ) -> None:
        self.broker = broker
        self.users_file = users_file
        self.on_users_changed = on_users_changed
        self.topology = BrokerTopology(broker)

    def _users(self) -> UsersFile:
        if self.users_file is None:
            return UsersFile()
        return read_users_file(self.users_file)

    def export(self) -> Definitions:
        return export_definitions(self._users(), self.topology)

    def export_json(self) -> str:
        return dump_definitions(self.export())

    def apply(self, defs: Definitions, warnings: list[DefinitionsWarning]) -> ImportOutcome:
        """Import a parsed document: the topology into the broker, users and permissions
        into the users file (what can be applied is; the rest is in the outcome)."""
        users = self._users()
        report = import_definitions(defs, users, self.topology, refused=(ModelError,))
        if self.users_file is None:
            left = ImportReport({k: report.counts.pop(k, 0) for k in ("user", "permission")})
            if left.summary() != "nothing":
                report.errors.append(f"$.users: {left.summary()} not imported: the broker has no users file")
        elif report.counts.get("user") or report.counts.get("permission"):
            write_users_file(self.users_file, users)
            if self.on_users_changed is not None:
                self.on_users_changed(users)
        return ImportOutcome(report, warnings)

    def import_document(self, document: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        try:
            defs, warnings = parse_definitions(document)
            outcome = self.apply(defs, warnings)
        except (DefinitionsError, UsersFileError, OSError) as exc:
            raise ValueError(str(exc)) from None
        outcome.log("import")
        return outcome.body()

    # -- users and permissions, for management (the DefinitionsPort's user operations) --
    def put_user(self, name: str, password: str | None, tags: object) -> bool:
        checked = check_tags(tags)
        credentials = scram_credentials(password) if password is not None else []

        def change(users: UsersFile) -> bool:
            user = users.users.get(name)
            if user is None:
                users.users[name] = User(credentials=credentials, tags=checked, permissions={})
                return True
            user.credentials, user.tags = credentials, checked
            return False

        return self.change_users(change)

    def delete_user(self, name: str) -> None:
        def change(users: UsersFile) -> None:
            if users.users.pop(name, None) is None:
                raise LookupError(f"no user {name!r}")

        self.change_users(change)

    def put_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> bool:
        perms = VhostPermissions(configure, write, read)  # ValueError: a pattern that does not compile

        def change(users: UsersFile) -> bool:
            u = users.users.get(user)
            if u is None:
                raise LookupError(f"no user {user!r}")
            new = vhost not in u.permissions
            u.permissions[vhost] = perms
            return new

        return self.change_users(change)

    def delete_permission(self, user: str, vhost: str) -> None:
        def change(users: UsersFile) -> None:
            u = users.users.get(user)
            if u is None or u.permissions.pop(vhost, None) is None:
                raise LookupError(f"user {user!r} has no permissions in vhost {vhost!r}")

        self.change_users(change)

    def change_users(self, change: Callable[[UsersFile], T]) -> T:
        """Apply ``change`` to the users file (rewritten atomically) and tell the service, so
        that logins and permission checks use the new users at once; what ``change``
        returned. Raises ValueError (one line) without a users file, or if it cannot be read."""
        if self.users_file is None:
            raise ValueError("this broker has no users file ([sasl] users_file): users live there")
        result: list[T] = []
        try:
            update_users_file(self.users_file, lambda users: result.append(change(users)))
            users = read_users_file(self.users_file)
        except (UsersFileError, OSError) as exc:
            raise ValueError(str(exc)) from None
        if self.on_users_changed is not None:
            self.on_users_changed(users)
        return result[0]

    def load_file(self, path: Path) -> ImportOutcome:
        """Import ``path`` (the ``definitions_file`` at start), logging one line per
        warning and skipped entry; raises DefinitionsError (one line, naming the file)
        if it cannot be read."""
        defs, warnings = load_definitions(path)
        try:
            outcome = self.apply(defs, warnings)
        except (UsersFileError, OSError) as exc:
            raise DefinitionsError(f"{path}: {exc}") from None
        outcome.log(str(path))
        return outcome
