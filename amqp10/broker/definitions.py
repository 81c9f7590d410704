"""Definitions import and export in RabbitMQ's JSON format (``rabbitmqctl export_definitions``).

A definitions file holds ``users`` (with password hashes and tags), ``vhosts``,
``permissions``, ``exchanges``, ``queues``, ``bindings`` and ``policies``; they map onto
the users file (:mod:`amqp10.broker.users`) and the broker's topology (a
:class:`Topology`: the core's virtual hosts, exchanges, queues, bindings, policies).

What is read but not applied, each reported as a warning when present:
``topic_permissions`` (RabbitMQ's routing-key patterns per exchange), ``parameters``
(runtime parameters: shovels, federation upstreams, vhost limits, operator policies),
``global_parameters`` (cluster name and id), users' and vhosts' ``limits``, tags
other than :data:`~amqp10.broker.permissions.KNOWN_TAGS`, and policy keys other than
:data:`~amqp10.broker.core.policies.POLICY_KEYS` (kept: an export gives them back).
A running broker is a :class:`Topology` through :mod:`amqp10.broker.topology`. A field this module does not
know is never dropped silently either: :func:`parse_definitions` returns a warning
naming its JSON path (``$.queues[3].x-foo``).

Both shapes RabbitMQ writes are read: ``rabbitmqctl export_definitions`` (vhosts as
``name``/``limits``/``metadata``, queues with ``type``, exchanges without ``internal``,
internal exchanges left out) and the management API's (vhost description, tags and
default queue type at the top level, exchanges with ``internal``). Export writes the
union (:meth:`VhostDef.canonical`; ``internal`` exchanges included, so that nothing
declared is lost).

Passwords: RabbitMQ's ``password_hash`` (base64 of a 4-byte salt and SHA-256 or
SHA-512 of salt + password) becomes a
:class:`~amqp10.sasl.credentials.PasswordHashCredential`, which PLAIN can check and
SCRAM cannot (such users log in with PLAIN until their password is set again with
``amqp10 users add``). A plain ``password`` (which RabbitMQ also accepts on import) is
turned into SCRAM credentials at once and never stored. Export writes a RabbitMQ hash
where the user has one; SCRAM-only users get ``password_hash: ""`` (to RabbitMQ: a
user without a password) plus their SCRAM credentials under ``amqp10_credentials``,
a field RabbitMQ ignores and this module reads back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .. import __version__
from ..sasl.credentials import (
    Credential,
    PasswordHashCredential,
    ScramCredential,
    format_credential,
    parse_credential,
)
from .config import one_line_error
from .core.arguments import QUEUE_TYPES, given_queue_type, is_known
from .core.exchanges import EXCHANGE_TYPES
from .core.policies import APPLY_TO, POLICY_KEYS
from .core.typed_values import as_json, json_keeps, typed, untyped
from .permissions import KNOWN_TAGS, VhostPermissions
from .users import User, UsersFile, scram_credentials

__all__ = [
    "FORMAT_VERSION",
    "KNOWN_EXCHANGE_ARGUMENTS",
    "KNOWN_QUEUE_ARGUMENTS",
    "BindingDef",
    "Definitions",
    "DefinitionsError",
    "DefinitionsWarning",
    "ExchangeDef",
    "GlobalParameterDef",
    "ImportReport",
    "InMemoryTopology",
    "ParameterDef",
    "PermissionDef",
    "PolicyDef",
    "QueueDef",
    "TopicPermissionDef",
    "Topology",
    "UserDef",
    "VhostDef",
    "VhostMetadata",
    "entry_arguments",
    "dump_definitions",
    "export_definitions",
    "exported_arguments",
    "import_definitions",
    "load_definitions",
    "parse_definitions",
]

FORMAT_VERSION = "4.0.0"
"""Written as ``rabbit_version``: the RabbitMQ release whose definitions format we follow."""

KNOWN_QUEUE_ARGUMENTS = frozenset(
    {
        "x-message-ttl",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-overflow",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-max-priority",
        "x-single-active-consumer",
        "x-delivery-limit",
        "x-consumer-timeout",
        "x-queue-leader-locator",
        "x-queue-type",
        "x-max-age",
    }
)
"""The queue arguments of RabbitMQ's this broker gives a meaning to; others are reported."""

KNOWN_EXCHANGE_ARGUMENTS = frozenset({"alternate-exchange"})

_MD5_ERA = tuple(f"3.{minor}." for minor in range(6))
"""RabbitMQ versions whose password hashes were MD5 (their exports do not say so)."""


def _count(n: int, noun: str) -> str:
    """``1 policy``, ``2 policies``."""
    if n == 1:
        return f"1 {noun}"
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {plural}"


class DefinitionsError(Exception):
    """A definitions file that cannot be read, worded for a person (one line)."""


@dataclass(frozen=True, slots=True)
class DefinitionsWarning:
    """Something in a definitions file that is not applied as written."""

    path: str
    """Where, as a JSON path: ``$.users[0].limits``."""
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# --------------------------------------------------------------------------- the format


class _Def(BaseModel):
    # extra="allow": unknown fields are kept so that they can be reported with their path.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class UserDef(_Def):
    """A user: name, RabbitMQ password hash, tags."""

    name: str
    password_hash: str = ""
    hashing_algorithm: str | None = None
    """Absent in files from RabbitMQ before 3.6.1; see :meth:`algorithm`."""
    tags: tuple[str, ...] = ()
    limits: dict[str, Any] = {}
    password: str | None = Field(default=None, repr=False)
    """A cleartext password (RabbitMQ accepts one on import): hashed at once, never kept."""
    amqp10_credentials: list[str] | None = None
    """This broker's SCRAM credentials (``format_credential`` form); ignored by RabbitMQ."""

    def algorithm(self, version: str | None) -> str:
        """The hashing algorithm of ``password_hash``; when the file names none, what
        RabbitMQ assumes for a file of ``version``: MD5 before 3.6, SHA-256 since."""
        if self.hashing_algorithm is not None:
            return self.hashing_algorithm
        if version is not None and version.startswith(_MD5_ERA):
            return "rabbit_password_hashing_md5"
        return "rabbit_password_hashing_sha256"

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, v: object) -> tuple[str, ...]:
        if isinstance(v, str):
            return tuple(t.strip() for t in v.split(",") if t.strip())
        if isinstance(v, list | tuple):
            return tuple(str(t) for t in v)
        raise ValueError("tags must be a list or a comma-separated string")


class VhostMetadata(_Def):
    """A virtual host's metadata (RabbitMQ 3.8+)."""

    description: str = ""
    tags: list[str] = []
    default_queue_type: str | None = None


class VhostDef(_Def):
    """A virtual host."""

    name: str
    description: str | None = None
    tags: list[str] | None = None
    default_queue_type: str | None = None
    metadata: VhostMetadata | None = None
    limits: Any = None

    def canonical(self) -> VhostDef:
        """The same virtual host as RabbitMQ 3.13+ writes it: description, tags and
        default queue type both at the top and in ``metadata`` (older files have one or
        the other); limits left out (not applied)."""
        meta = self.metadata or VhostMetadata()
        description = self.description if self.description is not None else meta.description
        tags = list(self.tags if self.tags is not None else meta.tags)
        queue_type = given_queue_type(self.default_queue_type) or given_queue_type(meta.default_queue_type)
        return VhostDef(
            name=self.name,
            description=description,
            tags=tags,
            default_queue_type=queue_type,
            metadata=VhostMetadata(
                description=description, tags=tags, default_queue_type=queue_type
            ),
        )


class PermissionDef(_Def):
    """A user's three patterns on a virtual host."""

    user: str
    vhost: str
    configure: str
    write: str
    read: str


class TopicPermissionDef(_Def):
    """RabbitMQ's topic permission (routing-key patterns for one exchange): not applied."""

    user: str
    vhost: str
    exchange: str
    write: str
    read: str


class ParameterDef(_Def):
    """A runtime parameter (shovel, federation, vhost limits, operator policy): not applied."""

    vhost: str
    component: str
    name: str
    value: Any


class GlobalParameterDef(_Def):
    """A cluster-wide parameter (cluster name, internal id): not applied."""

    name: str
    value: Any


class PolicyDef(_Def):
    """A policy: queues or exchanges whose names match ``pattern`` get ``definition``."""

    vhost: str
    name: str
    pattern: str
    apply_to: str = Field(default="all", alias="apply-to")
    definition: dict[str, Any] = {}
    priority: int = 0


def exported_arguments(arguments: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``arguments`` (as a queue, exchange or binding keeps them, typed: a 0-9-1 decimal,
    timestamp, ``Int8``, byte array...) as an export writes them: RabbitMQ's JSON of each
    (:func:`~amqp10.broker.core.typed_values.as_json`, what RabbitMQ 3.10 writes), and
    ``amqp10_arguments``: the typed form of those that JSON does not give back as they were
    (None: none), so that a re-import declares them as they were."""
    plain = {str(k): as_json(v) for k, v in arguments.items()}
    kept = {str(k): typed(v) for k, v in arguments.items() if not json_keeps(v)}
    return plain, kept or None


def entry_arguments(arguments: Mapping[str, Any], amqp10_arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """An entry's arguments to declare: its ``arguments`` with its ``amqp10_arguments`` (see
    :func:`exported_arguments`) read back in their place; ValueError for a malformed one."""
    out = dict(arguments)
    for k, v in (amqp10_arguments or {}).items():
        out[k] = untyped(v)
    return out


class QueueDef(_Def):
    """A queue and its RabbitMQ arguments (``x-message-ttl``, ``x-queue-type``, ...)."""

    name: str
    vhost: str
    durable: bool = True
    auto_delete: bool = False
    arguments: dict[str, Any] = {}
    type: str | None = None
    amqp10_arguments: dict[str, Any] | None = None
    """The typed form of the arguments whose JSON loses their type (see
    :func:`exported_arguments`); ignored by RabbitMQ."""


class ExchangeDef(_Def):
    """An exchange (``direct``, ``fanout``, ``topic``, ``headers``)."""

    name: str
    vhost: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = {}
    amqp10_arguments: dict[str, Any] | None = None


class BindingDef(_Def):
    """A binding from an exchange to a queue or another exchange."""

    source: str
    vhost: str
    destination: str
    destination_type: Literal["queue", "exchange"]
    routing_key: str = ""
    arguments: dict[str, Any] = {}
    amqp10_arguments: dict[str, Any] | None = None


class Definitions(_Def):
    """A whole definitions file, in RabbitMQ's shape."""

    rabbit_version: str | None = None
    rabbitmq_version: str | None = None
    product_name: str | None = None
    product_version: str | None = None
    users: list[UserDef] = []
    vhosts: list[VhostDef] = []
    permissions: list[PermissionDef] = []
    topic_permissions: list[TopicPermissionDef] = []
    parameters: list[ParameterDef] = []
    global_parameters: list[GlobalParameterDef] = []
    policies: list[PolicyDef] = []
    queues: list[QueueDef] = []
    exchanges: list[ExchangeDef] = []
    bindings: list[BindingDef] = []


def _unknown_fields(model: BaseModel, path: str) -> Iterator[DefinitionsWarning]:
    for key in model.model_extra or {}:
        yield DefinitionsWarning(f"{path}.{key}", "unknown field, ignored")
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _unknown_fields(value, f"{path}.{name}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from _unknown_fields(item, f"{path}.{name}[{i}]")


def _not_applied(defs: Definitions) -> Iterator[DefinitionsWarning]:
    """Warnings for what is accepted but has no effect here."""
    sections = {
        "topic_permissions": "topic permissions are not enforced",
        "parameters": "runtime parameters (shovels, federation, limits, operator policies) are not applied",
        "global_parameters": "global parameters are not applied",
    }
    for section, why in sections.items():
        items = getattr(defs, section)
        if items:
            yield DefinitionsWarning(f"$.{section}", f"{_count(len(items), 'entry')} read; {why}")
    for i, u in enumerate(defs.users):
        if u.limits:
            yield DefinitionsWarning(f"$.users[{i}].limits", "user limits are not applied")
        for tag in u.tags:
            if tag not in KNOWN_TAGS:
                yield DefinitionsWarning(
                    f"$.users[{i}].tags", f"tag {tag!r} has no meaning here, dropped"
                )
    for i, v in enumerate(defs.vhosts):
        if v.limits:
            yield DefinitionsWarning(f"$.vhosts[{i}].limits", "vhost limits are not applied")
    for i, q in enumerate(defs.queues):
        for arg in q.arguments:
            if arg not in KNOWN_QUEUE_ARGUMENTS and not is_known(arg):
                yield DefinitionsWarning(
                    f"$.queues[{i}].arguments.{arg}", "queue argument has no meaning here (kept)"
                )
        qtype = q.type or q.arguments.get("x-queue-type")
        if qtype is not None and qtype not in QUEUE_TYPES:
            yield DefinitionsWarning(
                f"$.queues[{i}]", f"queue type {qtype!r} not supported; declared as a classic queue"
            )
    for i, pol in enumerate(defs.policies):
        if pol.apply_to not in APPLY_TO:
            continue  # refused on import, with the reason
        for key in pol.definition:
            applied = key in POLICY_KEYS and APPLY_TO[pol.apply_to] - {"exchange"}
            if not applied:
                yield DefinitionsWarning(
                    f"$.policies[{i}].definition.{key}", "policy key not applied (kept for export)"
                )
    for i, x in enumerate(defs.exchanges):
        for arg in x.arguments:
            if arg not in KNOWN_EXCHANGE_ARGUMENTS:
                yield DefinitionsWarning(
                    f"$.exchanges[{i}].arguments.{arg}", "exchange argument not supported"
                )


def parse_definitions(
    data: str | bytes | Mapping[str, Any],
) -> tuple[Definitions, list[DefinitionsWarning]]:
    """Parse a definitions document (JSON text or already decoded); also return the warnings:
    every unknown field (with its JSON path) and everything read but not applied.

    Raises :class:`DefinitionsError` (one line) for invalid JSON or a wrong shape.
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise DefinitionsError(f"not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise DefinitionsError("a definitions document is a JSON object")
    try:
        defs = Definitions.model_validate(data)
    except ValidationError as exc:
        raise DefinitionsError(one_line_error(exc)) from None
    return defs, [*_unknown_fields(defs, "$"), *_not_applied(defs)]


def load_definitions(path: Path) -> tuple[Definitions, list[DefinitionsWarning]]:
    """:func:`parse_definitions` of a file; errors name the file."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise DefinitionsError(f"definitions file not found: {path}") from None
    try:
        return parse_definitions(text)
    except DefinitionsError as exc:
        raise DefinitionsError(f"{path}: {exc}") from None


def dump_definitions(defs: Definitions) -> str:
    """JSON text in RabbitMQ's shape (``apply-to``, no null fields); a value JSON has no type
    for (a typed argument a :class:`Topology` left as it is) as RabbitMQ writes it (never an error)."""
    return json.dumps(defs.model_dump(by_alias=True, exclude_none=True), indent=2, default=as_json) + "\n"


# --------------------------------------------------------------------------- topology


class Topology(Protocol):
    """What the broker core provides for definitions import and export.

    Listings return what was declared (not the predeclared ``amq.*`` exchanges or the
    default exchange, as RabbitMQ's exports leave them out); ``declare_*`` create or
    update, raising ValueError (worded for a person; or the exceptions given to
    :func:`import_definitions` as ``refused``) for what the core cannot do.
    """

    def list_vhosts(self) -> list[VhostDef]: ...
    def list_exchanges(self, vhost: str) -> list[ExchangeDef]: ...
    def list_queues(self, vhost: str) -> list[QueueDef]: ...
    def list_bindings(self, vhost: str) -> list[BindingDef]: ...
    def list_policies(self, vhost: str) -> list[PolicyDef]: ...
    def declare_vhost(self, vhost: VhostDef) -> None: ...
    def declare_exchange(self, exchange: ExchangeDef) -> None: ...
    def declare_queue(self, queue: QueueDef) -> None: ...
    def declare_binding(self, binding: BindingDef) -> None: ...
    def declare_policy(self, policy: PolicyDef) -> None: ...


class InMemoryTopology:
    """A :class:`Topology` that only remembers: for ``amqp10 definitions check`` and tests.

    It keeps its own plain records (not the definition objects it was given), as a
    real core would, and refuses bindings whose ends were not declared.
    """

    def __init__(self) -> None:
        self.vhosts: dict[str, dict[str, Any]] = {}
        self.exchanges: dict[tuple[str, str], dict[str, Any]] = {}
        self.queues: dict[tuple[str, str], dict[str, Any]] = {}
        self.bindings: dict[str, list[dict[str, Any]]] = {}
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}

    def _vhost(self, name: str) -> None:
        if name not in self.vhosts:
            raise ValueError(f"no vhost {name!r}")

    def list_vhosts(self) -> list[VhostDef]:
        return [VhostDef(name=name, **fields).canonical() for name, fields in self.vhosts.items()]

    def list_exchanges(self, vhost: str) -> list[ExchangeDef]:
        return [
            ExchangeDef(vhost=v, name=n, **f) for (v, n), f in self.exchanges.items() if v == vhost
        ]

    def list_queues(self, vhost: str) -> list[QueueDef]:
        return [QueueDef(vhost=v, name=n, **f) for (v, n), f in self.queues.items() if v == vhost]

    def list_bindings(self, vhost: str) -> list[BindingDef]:
        return [BindingDef(vhost=vhost, **f) for f in self.bindings.get(vhost, [])]

    def list_policies(self, vhost: str) -> list[PolicyDef]:
        return [
            PolicyDef(vhost=v, name=n, **f) for (v, n), f in self.policies.items() if v == vhost
        ]

    def declare_vhost(self, vhost: VhostDef) -> None:
        self.vhosts[vhost.name] = vhost.canonical().model_dump(
            include={"description", "tags", "default_queue_type"}
        )

    def declare_exchange(self, exchange: ExchangeDef) -> None:
        self._vhost(exchange.vhost)
        if exchange.type not in EXCHANGE_TYPES:
            raise ValueError(f"exchange type {exchange.type!r} not supported")
        self.exchanges[exchange.vhost, exchange.name] = exchange.model_dump(
            include={"type", "durable", "auto_delete", "internal", "arguments", "amqp10_arguments"}
        )

    def declare_queue(self, queue: QueueDef) -> None:
        self._vhost(queue.vhost)
        self.queues[queue.vhost, queue.name] = queue.model_dump(
            include={"durable", "auto_delete", "arguments", "type", "amqp10_arguments"}
        )

    def declare_binding(self, binding: BindingDef) -> None:
        self._vhost(binding.vhost)
        ends = [(binding.source, "exchange"), (binding.destination, binding.destination_type)]
        for name, kind in ends:
            known = self.queues if kind == "queue" else self.exchanges
            if (binding.vhost, name) not in known and not (
                kind == "exchange" and (name == "" or name.startswith("amq."))
            ):
                raise ValueError(f"no {kind} {name!r} in vhost {binding.vhost!r}")
        record = binding.model_dump(
            include={"source", "destination", "destination_type", "routing_key", "arguments", "amqp10_arguments"}
        )
        if record not in self.bindings.setdefault(binding.vhost, []):
            self.bindings[binding.vhost].append(record)

    def declare_policy(self, policy: PolicyDef) -> None:
        self._vhost(policy.vhost)
        self.policies[policy.vhost, policy.name] = policy.model_dump(
            by_alias=True, include={"pattern", "apply_to", "definition", "priority"}
        )


# --------------------------------------------------------------------------- import


@dataclass(slots=True)
class ImportReport:
    """What an import did: counts per kind, and what it could not do (one line each)."""

    counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """``3 users, 2 vhosts, ...`` (kinds with none left out)."""
        return ", ".join(_count(n, kind) for kind, n in self.counts.items() if n) or "nothing"


def _credentials(u: UserDef, version: str | None) -> list[Credential]:
    # A cleartext password wins over a hash, as in RabbitMQ's import.
    if u.amqp10_credentials:
        return [parse_credential(c) for c in u.amqp10_credentials]
    if u.password:
        return scram_credentials(u.password)
    if u.password_hash:
        return [PasswordHashCredential.from_rabbit(u.password_hash, u.algorithm(version))]
    return []


def import_definitions(
    defs: Definitions,
    users: UsersFile,
    topology: Topology,
    *,
    refused: tuple[type[Exception], ...] = (),
) -> ImportReport:
    """Apply ``defs``: users and permissions into ``users`` (the caller writes the file),
    the rest into ``topology``. Imported users replace existing ones of the same name
    (their permissions on vhosts the file does not mention stay).

    An entry that cannot be applied (a bad hash, a binding to nothing, a type the core
    refuses: ValueError, or one of ``refused``, the core's own refusals) is
    skipped and reported in the result; the others are applied, in RabbitMQ's order:
    users, vhosts, permissions, exchanges, policies (before the queues they apply to),
    queues, bindings.
    """
    report = ImportReport()
    version = defs.rabbitmq_version or defs.rabbit_version
    skipped: tuple[type[Exception], ...] = (ValueError, *refused)

    def apply(kind: str, path: str, action: Any, *args: Any) -> None:
        try:
            action(*args)
        except skipped as exc:
            report.errors.append(f"{path}: {exc}")
        else:
            report.counts[kind] = report.counts.get(kind, 0) + 1

    def add_user(u: UserDef) -> None:
        tags = tuple(t for t in u.tags if t in KNOWN_TAGS)
        old = users.users.get(u.name)
        permissions = {} if old is None else old.permissions
        users.users[u.name] = User(_credentials(u, version), tags, permissions)

    def add_permission(p: PermissionDef) -> None:
        if p.user not in users.users:
            raise ValueError(f"no user {p.user!r}")
        users.users[p.user].permissions[p.vhost] = VhostPermissions(p.configure, p.write, p.read)

    for i, u in enumerate(defs.users):
        apply("user", f"$.users[{i}]", add_user, u)
    for i, v in enumerate(defs.vhosts):
        apply("vhost", f"$.vhosts[{i}]", topology.declare_vhost, v)
    for i, p in enumerate(defs.permissions):
        apply("permission", f"$.permissions[{i}]", add_permission, p)
    for i, x in enumerate(defs.exchanges):
        if x.name == "" or x.name.startswith("amq."):
            report.errors.append(
                f"$.exchanges[{i}]: {x.name or '(default)'!s} is predeclared, skipped"
            )
            continue
        apply("exchange", f"$.exchanges[{i}]", topology.declare_exchange, x)
    for i, pol in enumerate(defs.policies):
        apply("policy", f"$.policies[{i}]", topology.declare_policy, pol)
    for i, q in enumerate(defs.queues):
        apply("queue", f"$.queues[{i}]", topology.declare_queue, q)
    for i, b in enumerate(defs.bindings):
        apply("binding", f"$.bindings[{i}]", topology.declare_binding, b)
    return report


# --------------------------------------------------------------------------- export


def _user_def(name: str, user: User) -> UserDef:
    hashes = [c for c in user.credentials if isinstance(c, PasswordHashCredential)]
    scram = [c for c in user.credentials if isinstance(c, ScramCredential)]
    return UserDef(
        name=name,
        password_hash=hashes[0].to_rabbit() if hashes else "",
        hashing_algorithm=hashes[0].algorithm if hashes else "rabbit_password_hashing_sha256",
        tags=user.tags,
        amqp10_credentials=[format_credential(c) for c in scram] or None,
    )


def export_definitions(users: UsersFile, topology: Topology) -> Definitions:
    """The users file and the topology as one definitions document.

    Virtual hosts that permissions name but the topology does not know are listed
    too (bare), so that RabbitMQ, which refuses permissions on a missing vhost, can
    import the document.
    """
    vhosts = topology.list_vhosts()
    known = {v.name for v in vhosts}
    named = dict.fromkeys(vhost for u in users.users.values() for vhost in u.permissions)
    vhosts += [VhostDef(name=name) for name in named if name not in known]
    names = [v.name for v in vhosts if v.name in known]  # (a host only the users file names holds nothing)
    return Definitions(
        rabbit_version=FORMAT_VERSION,
        product_name="amqp10",
        product_version=__version__,
        users=[_user_def(name, u) for name, u in users.users.items()],
        vhosts=[v.canonical() for v in vhosts],
        permissions=[
            PermissionDef(user=name, vhost=vhost, configure=p.configure, write=p.write, read=p.read)
            for name, u in users.users.items()
            for vhost, p in u.permissions.items()
        ],
        policies=[p for v in names for p in topology.list_policies(v)],
        queues=[q for v in names for q in topology.list_queues(v)],
        exchanges=[x for v in names for x in topology.list_exchanges(v)],
        bindings=[b for v in names for b in topology.list_bindings(v)],
    )
