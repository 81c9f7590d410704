"""The protocols the broker serves, in the order the service asks them about a header.

Adding a protocol: a package with a :class:`~.frontend.FrontEnd`, and one entry here.
"""

from __future__ import annotations

from typing import Final

from .amqp010.frontend import Amqp010FrontEnd
from .amqp091.frontend import Amqp091FrontEnd
from .amqp1.frontend import Amqp1FrontEnd
from .frontend import FrontEnd

__all__ = ["FRONT_ENDS"]

FRONT_ENDS: Final[tuple[FrontEnd, ...]] = (Amqp1FrontEnd(), Amqp010FrontEnd(), Amqp091FrontEnd())
"""1.0 first: it claims its own family's other versions; 0-10 before 0-9-1, which answers
anything else."""
