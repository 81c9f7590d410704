"""What the 0-10 codec knows of a type, a struct, a control or a command (the tables in
:mod:`.spec` are made of these), and :class:`Compound`: one decoded or to-be-encoded
struct, control or command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Compound", "CompoundSpec", "FieldSpec", "TypeSpec"]


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A primitive type: its code (None: it has none, so it cannot appear in a map, list or
    array) and its width: ``fixed`` octets, or a length prefix of ``variable`` octets."""

    name: str
    code: int | None
    fixed: int | None
    variable: int | None


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field: its name (``-`` as ``_``) and its type, domains resolved (a primitive type's
    name, or a struct's)."""

    name: str
    type: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class CompoundSpec:
    """A struct, control or command.

    ``code`` is the class code shifted left 8 bits plus the item's own code (None: a struct
    without one); ``size`` and ``pack`` are the octets of its size prefix and of its
    property flags (controls and commands: 0 and 2)."""

    kind: str
    """``struct``, ``control`` or ``command``."""
    name: str
    """``class.item`` for controls and commands (``message.transfer``); a struct's own name."""
    code: int | None
    size: int
    pack: int
    fields: tuple[FieldSpec, ...]
    result: str | None = None
    """The struct a command's ``execution.result`` carries (None: no result)."""
    segments: bool = False
    """A command that carries a header and a body (``message.transfer``)."""


class Compound:
    """A struct, control or command with its field values (absent: the field's default,
    False for a bit, None otherwise). A command also has its id, ``sync`` flag and, for
    ``message.transfer``, its header structs and body; and ``raw_headers``, the header
    segment as encoded: a received transfer's (beside ``headers``, decoded), or, set on
    one to send, what is sent as it is instead of ``headers`` encoded."""

    __slots__ = ("body", "headers", "id", "raw_headers", "spec", "sync", "values")

    def __init__(
        self, spec: CompoundSpec, values: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        self.spec = spec
        self.values: dict[str, Any] = dict(values or {}, **kwargs)
        self.sync = False
        self.id = 0
        self.headers: list[Compound] = []
        self.raw_headers: bytes | None = None
        self.body = b""

    @property
    def name(self) -> str:
        return self.spec.name

    def __getitem__(self, name: str) -> Any:
        value = self.values.get(name)
        if value is None:
            for f in self.spec.fields:
                if f.name == name:
                    return False if f.type == "bit" else None
            raise KeyError(f"{self.spec.name} has no field {name!r}")
        return value

    def get(self, name: str, default: Any = None) -> Any:
        value = self.values.get(name)
        return default if value is None else value

    def header(self, name: str) -> Compound | None:
        """The header struct called ``name`` (``delivery-properties``), if it came."""
        for h in self.headers:
            if h.spec.name == name:
                return h
        return None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Compound):
            return NotImplemented
        return (
            self.spec.name == other.spec.name
            and self._present() == other._present()
            and self.headers == other.headers
            and self.body == other.body
            and self.sync == other.sync
        )

    __hash__ = None  # type: ignore[assignment]

    def _present(self) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if v is not None and v is not False}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._present().items())
        extra = f", headers={self.headers!r}, body={len(self.body)}B" if self.spec.segments else ""
        return f"{self.spec.name}({args}{extra})"
