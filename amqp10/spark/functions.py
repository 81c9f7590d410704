"""Column helpers for the bodies the data source reads: text and JSON.

>>> from amqp10.spark import body_json                           # doctest: +SKIP
>>> events.select(body_json("id LONG, region STRING").alias("order"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import ArrayType, MapType, StructType

__all__ = ["body_json", "body_text"]


def body_text(body: str = "body", body_string: str = "body_string") -> Column:
    """The message body as text: ``body_string`` (a string body, or UTF-8 data), else
    ``body`` decoded as UTF-8 (invalid bytes replaced).

    Either column may be missing from the read (``columns``): name only the one you
    read and pass ``""`` for the other.
    """
    from pyspark.sql import functions as F

    parts = []
    if body_string:
        parts.append(F.col(body_string))
    if body:
        parts.append(F.make_valid_utf8(F.col(body).cast("string")))
    if not parts:
        raise ValueError("body_text needs the body or the body_string column")
    return parts[0] if len(parts) == 1 else F.coalesce(*parts)


def body_json(
    schema: StructType | ArrayType | MapType | str,
    body: str = "body",
    body_string: str = "body_string",
    options: dict[str, str] | None = None,
) -> Column:
    """The message body parsed as JSON into ``schema`` (DDL, or a struct, array or map type), as ``from_json``."""
    from pyspark.sql import functions as F

    return F.from_json(body_text(body, body_string), schema, options or {})
