"""Part 4 transaction types (transactions.xml)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import definitions as _definitions  # noqa: F401  (restricted types first)
from .composite import Composite, Field
from .primitives import symbol

__all__ = ["Coordinator", "Declare", "Declared", "Discharge", "TransactionalState"]


class Coordinator(Composite):
    """``coordinator``: the target for transaction control messages."""

    AMQP_NAME = "coordinator"
    DESCRIPTOR_NAME = "amqp:coordinator:list"
    DESCRIPTOR_CODE = 0x30
    PROVIDES = "target"
    FIELDS = (Field("capabilities", "symbol", multiple=True, requires="txn-capability"),)
    __slots__ = ("capabilities",)
    capabilities: list[symbol] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            capabilities: str | Sequence[str] | None = None,
        ) -> None: ...


class Declare(Composite):
    """``declare``: message body asking the coordinator for a transaction."""

    AMQP_NAME = "declare"
    DESCRIPTOR_NAME = "amqp:declare:list"
    DESCRIPTOR_CODE = 0x31
    FIELDS = (Field("global-id", "*", requires="global-tx-id"),)
    __slots__ = ("global_id",)
    global_id: Any

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            global_id: Any = None,
        ) -> None: ...


class Discharge(Composite):
    """``discharge``: message body ending a transaction (commit, or rollback with fail)."""

    AMQP_NAME = "discharge"
    DESCRIPTOR_NAME = "amqp:discharge:list"
    DESCRIPTOR_CODE = 0x32
    FIELDS = (
        Field("txn-id", "*", mandatory=True, requires="txn-id"),
        Field("fail", "boolean"),
    )
    __slots__ = ("fail", "txn_id")
    txn_id: Any
    fail: bool | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            txn_id: Any,
            fail: bool | None = None,
        ) -> None: ...


class Declared(Composite):
    """``declared``: outcome carrying the id of a declared transaction."""

    AMQP_NAME = "declared"
    DESCRIPTOR_NAME = "amqp:declared:list"
    DESCRIPTOR_CODE = 0x33
    PROVIDES = "delivery-state, outcome"
    FIELDS = (Field("txn-id", "*", mandatory=True, requires="txn-id"),)
    __slots__ = ("txn_id",)
    txn_id: Any

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            txn_id: Any,
        ) -> None: ...


class TransactionalState(Composite):
    """``transactional-state``: a delivery's state within a transaction."""

    AMQP_NAME = "transactional-state"
    DESCRIPTOR_NAME = "amqp:transactional-state:list"
    DESCRIPTOR_CODE = 0x34
    PROVIDES = "delivery-state"
    FIELDS = (
        Field("txn-id", "*", mandatory=True, requires="txn-id"),
        Field("outcome", "*", requires="outcome"),
    )
    __slots__ = ("outcome", "txn_id")
    txn_id: Any
    outcome: Any

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            txn_id: Any,
            outcome: Any = None,
        ) -> None: ...
