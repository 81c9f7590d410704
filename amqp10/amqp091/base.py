"""Base classes of the generated method and property classes (see ``methods.py``)."""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["Method", "Properties"]


def _same_fields(a: Method | Properties, b: object) -> bool:
    return type(b) is type(a) and all(getattr(a, f) == getattr(b, f) for f, _ in a.FIELDS)


class Method:
    """One AMQP method: its arguments as attributes, named as in the spec (``-`` → ``_``).

    Subclasses are generated from the spec XML; treat instances as values (compare
    with ``==``, do not mutate one that was sent or received).
    """

    __slots__ = ()
    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    INDEX: ClassVar[int]
    """``CLASS_ID << 16 | METHOD_ID``: the key of the method tables."""
    NAME: ClassVar[str]
    """The spec's name, ``class.method`` (``basic.publish``)."""
    SYNCHRONOUS: ClassVar[bool]
    """The sender waits for a response (``RESPONSES``)."""
    CONTENT: ClassVar[bool]
    """Followed by a content header and body frames."""
    FIELDS: ClassVar[tuple[tuple[str, str], ...]]
    """``(attribute, AMQP type)`` in wire order."""
    RESPONSES: ClassVar[tuple[type[Method], ...]] = ()
    RECEIVED_BY: ClassVar[frozenset[str]]
    """The roles (``"server"``, ``"client"``) that may receive it (the spec's chassis)."""

    def encode(self, buf: bytearray) -> None:
        """Append the arguments (not the class and method ids)."""
        raise NotImplementedError

    @classmethod
    def decode(cls, data: bytes, off: int) -> tuple[Method, int]:
        """The method whose arguments start at ``off``, and the offset after them."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return _same_fields(self, other)

    def __hash__(self) -> int:
        return hash(self.INDEX)

    def __repr__(self) -> str:
        args = ", ".join(f"{f}={getattr(self, f)!r}" for f, _ in self.FIELDS)
        return f"{type(self).__name__}({args})"


class Properties:
    """Content header properties of one content class; None means absent."""

    __slots__ = ()
    CLASS_ID: ClassVar[int]
    FIELDS: ClassVar[tuple[tuple[str, str], ...]]

    def encode(self, buf: bytearray) -> None:
        """Append the property-flags word(s) and the present properties."""
        raise NotImplementedError

    @classmethod
    def decode(cls, data: bytes, off: int) -> tuple[Properties, int]:
        """The properties at ``off`` (flags first) and the offset after them."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return _same_fields(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        args = ", ".join(
            f"{f}={getattr(self, f)!r}" for f, _ in self.FIELDS if getattr(self, f) is not None
        )
        return f"{type(self).__name__}({args})"

    def as_dict(self) -> dict[str, Any]:
        """The present properties by attribute name."""
        return {f: v for f, _ in self.FIELDS if (v := getattr(self, f)) is not None}
