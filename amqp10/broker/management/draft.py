"""The OASIS AMQP Management draft's operations, on :class:`.api.Management`, protocol-neutral.

A :class:`Request` carries what the draft puts in application properties
(``operation``, ``type``, ``name``, ``identity``, and ``entityType``, ``offset``,
``count`` for QUERY) and the body. Entity operations: ``CREATE`` (body: the
attributes) 201, ``READ`` 200, ``UPDATE`` (body: attributes to change) 200,
``DELETE`` 204 (an empty map), and ours, ``PURGE`` (200, ``{"purged": n}``) and
``PEEK`` (``count``, ``offset``: the position of the first; 200, a list of messages as maps). Node operations (``type``
``org.amqp.management``, ``name`` ``self``, both optional here): ``QUERY`` (body
``attributeNames``, optionally ``entityType``; 200, ``{"attributeNames": [...],
"results": [[...], ...]}`` and a ``count`` property), ``GET-TYPES``,
``GET-ATTRIBUTES``, ``GET-OPERATIONS``, ``GET-MGMT-NODES``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...management.oasis import Request, Response
from .access import Caller
from .entities import ENTITY_TYPES, EntityType, type_named
from .errors import BadRequest, NotImplementedOperation

if TYPE_CHECKING:
    from .api import Management

__all__ = [
    "DEFAULT_PEEK",
    "ENTITY_BASE",
    "ENTITY_OPERATION_ARGS",
    "MANAGEMENT_TYPE",
    "NODE_OPERATIONS",
    "Request",
    "Response",
    "execute",
]

MANAGEMENT_TYPE = "org.amqp.management"
"""The management node's own type (the draft's): what node operations name as ``type``."""
ENTITY_BASE = "org.amqp.management.entity"
NODE_OPERATIONS: dict[str, list[str]] = {
    "QUERY": ["entityType", "offset", "count", "attributeNames"],
    "GET-TYPES": ["entityType"],
    "GET-ATTRIBUTES": ["entityType"],
    "GET-OPERATIONS": ["entityType"],
    "GET-MGMT-NODES": [],
}
ENTITY_OPERATION_ARGS: dict[str, list[str]] = {
    "CREATE": ["name", "attributes"],
    "READ": ["name", "identity"],
    "UPDATE": ["name", "identity", "attributes"],
    "DELETE": ["name", "identity"],
    "PURGE": ["name", "identity"],
    "PEEK": ["name", "identity", "count", "offset"],
}
DEFAULT_PEEK = 10


def execute(m: Management, caller: Caller, req: Request) -> Response:
    op = req.operation
    if not isinstance(op, str) or not op:
        raise BadRequest(f"the application property 'operation' must be a non-empty string, not {op!r}")
    handler = _NODE.get(op.upper()) or _ENTITY.get(op.upper())
    if handler is None:
        raise NotImplementedOperation(f"unknown operation {op!r}")
    return handler(m, caller, req)


# -- entity operations ---------------------------------------------------------------------------
def _entity_type(req: Request) -> EntityType:
    if req.type is None:
        raise BadRequest("the application property 'type' (the entity type) is missing")
    return type_named(req.type)


def _name(req: Request) -> str:
    name = req.name if req.name is not None else req.identity
    if name is None:
        raise BadRequest("the application property 'name' (or 'identity') is missing")
    if not isinstance(name, str):
        raise BadRequest(f"'name' must be a string, not {type(name).__name__}")
    return name


def _attributes(req: Request) -> Mapping[str, Any]:
    if req.body is None:
        return {}
    if not isinstance(req.body, Mapping):
        raise BadRequest(f"the body must be a map of attributes, not {type(req.body).__name__}")
    if not all(isinstance(k, str) for k in req.body):
        raise BadRequest("the body's attribute names must be strings")
    return req.body


def _ok(status: int, body: Any, **props: Any) -> Response:
    return Response(status=status, description={200: "OK", 201: "Created", 204: "No Content"}[status], body=body, properties=props)


def _create(m: Management, c: Caller, req: Request) -> Response:
    t = _entity_type(req)
    name = req.name if req.name is not None else ("" if t.name == "binding" else None)
    if name is None:
        raise BadRequest("CREATE needs the application property 'name'")
    if not isinstance(name, str):
        raise BadRequest(f"'name' must be a string, not {type(name).__name__}")
    return _ok(201, m.create(c, t.name, name, _attributes(req)))


def _read(m: Management, c: Caller, req: Request) -> Response:
    return _ok(200, m.read(c, _entity_type(req).name, _name(req)))


def _update(m: Management, c: Caller, req: Request) -> Response:
    return _ok(200, m.update(c, _entity_type(req).name, _name(req), _attributes(req)))


def _delete(m: Management, c: Caller, req: Request) -> Response:
    m.delete(c, _entity_type(req).name, _name(req))
    return _ok(204, {})


def _purge(m: Management, c: Caller, req: Request) -> Response:
    return _ok(200, {"purged": m.purge(c, _entity_type(req).name, _name(req))})


def _peek(m: Management, c: Caller, req: Request) -> Response:
    count = _number(req, "count", DEFAULT_PEEK)
    offset = _number(req, "offset", 0)
    messages = m.peek(c, _entity_type(req).name, _name(req), count, offset=offset)
    return _ok(200, messages, count=len(messages))


# -- node operations -----------------------------------------------------------------------------
def _number(req: Request, key: str, default: int) -> int:
    body = req.body if isinstance(req.body, Mapping) else {}
    value = req.properties.get(key, body.get(key, default))
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key!r} must be an integer, not {type(value).__name__} {value!r}"[:200])
    if value < 0:
        raise BadRequest(f"{key!r} must not be negative")
    return value


def _entity_type_filter(req: Request) -> EntityType | None:
    body = req.body if isinstance(req.body, Mapping) else {}
    value = req.properties.get("entityType", body.get("entityType"))
    return None if value is None else type_named(value)


def _query(m: Management, c: Caller, req: Request) -> Response:
    if req.body is not None and not isinstance(req.body, Mapping):
        raise BadRequest(f"a QUERY's body must be a map (attributeNames), not {type(req.body).__name__}")
    t = _entity_type_filter(req)
    names = (req.body or {}).get("attributeNames", [])
    if names is None:
        names = []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRequest("attributeNames must be a list of strings")
    offset = _number(req, "offset", 0)
    count = _number(req, "count", m.config.max_query_count)
    if count > m.config.max_query_count:
        raise BadRequest(f"count {count} is above the limit of {m.config.max_query_count}")
    if not names:
        names = list(t.attributes) if t is not None else ["name", "identity", "type"]
    types = [t] if t is not None else list(ENTITY_TYPES.values())
    rows: list[list[Any]] = []
    for each in types:
        if t is None and not m.access.has_any(c, m.config.read_tags):
            break
        entities = m.list(c, each.name, offset=0, count=None) if t is not None else _readable(m, c, each)
        rows.extend([e.get(n) for n in names] for e in entities)
        if len(rows) >= offset + count:
            break
    page = rows[offset : offset + count]
    return _ok(200, {"attributeNames": names, "results": page}, count=len(page))


def _readable(m: Management, c: Caller, t: EntityType) -> list[dict[str, Any]]:
    """Every entity of ``t`` (an untyped QUERY): a type the caller may not list is left out."""
    from .errors import ManagementError

    try:
        return m.list(c, t.name)
    except ManagementError:
        return []


def _types_asked(m: Management, c: Caller, req: Request) -> list[EntityType]:
    m.access.can_read(c, req.operation)
    t = _entity_type_filter(req)
    return [t] if t is not None else list(ENTITY_TYPES.values())


def _get_types(m: Management, c: Caller, req: Request) -> Response:
    body: dict[str, Any] = {t.name: [ENTITY_BASE] for t in _types_asked(m, c, req)}
    if _entity_type_filter(req) is None:
        body[MANAGEMENT_TYPE] = []
        body[ENTITY_BASE] = []
    return _ok(200, body)


def _get_attributes(m: Management, c: Caller, req: Request) -> Response:
    return _ok(200, {t.name: list(t.attributes) for t in _types_asked(m, c, req)})


def _get_operations(m: Management, c: Caller, req: Request) -> Response:
    body: dict[str, Any] = {t.name: {op: ENTITY_OPERATION_ARGS[op] for op in t.operations} for t in _types_asked(m, c, req)}
    if _entity_type_filter(req) is None:
        body[MANAGEMENT_TYPE] = dict(NODE_OPERATIONS)
    return _ok(200, body)


def _get_mgmt_nodes(m: Management, c: Caller, req: Request) -> Response:
    m.access.can_read(c, "GET-MGMT-NODES")
    return _ok(200, [])


Handler = Callable[["Management", Caller, "Request"], "Response"]

_ENTITY: dict[str, Handler] = {
    "CREATE": _create,
    "READ": _read,
    "UPDATE": _update,
    "DELETE": _delete,
    "PURGE": _purge,
    "PEEK": _peek,
}
_NODE: dict[str, Handler] = {
    "QUERY": _query,
    "GET-TYPES": _get_types,
    "GET-ATTRIBUTES": _get_attributes,
    "GET-OPERATIONS": _get_operations,
    "GET-MGMT-NODES": _get_mgmt_nodes,
}
