"""The hooks a plug-in of the 1.0 front end fills in (Service Bus's is the one there is).

A plug-in adds addresses (nodes beyond the virtual host's, request/response nodes,
an address form of its own), checks (on each attach; once a second), message
formats a publisher may send, and the kind of consumer its links get. The router
and the per-concern handlers call these hooks, never the plug-in's insides;
:class:`Amqp1Plugin` itself is the plug-in that adds nothing, so a connection
without one runs none of its code per event beyond these calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ...transport import Delivery, Link, Sender
from ...types import Source
from ..core import Node, NodeElsewhere, Queue, QueuedMessage, Stream
from .consumers import LinkConsumer

if TYPE_CHECKING:
    from .context import Amqp1Context
    from .management import ManagementNode

__all__ = ["NO_PLUGIN", "Amqp1Plugin", "ConsumerView", "PublishFormat"]

PublishFormat = Callable[[Delivery, Node], None]
"""Takes a publisher's delivery of a message format of the plug-in's (and settles it)."""

ConsumerView = tuple[dict[Any, Any], Callable[[QueuedMessage], bool]]
"""Filters for a consumer's attach answer, and the messages it may see."""


class Amqp1Plugin:
    """The hooks of a 1.0 plug-in; this base adds nothing (a connection without one)."""

    formats: Mapping[int, PublishFormat] = MappingProxyType({})
    """Publishers' message formats it takes itself, by message-format code."""

    def admit(self, link: Link) -> str | None:
        """Check a link the peer attaches: None (let in) or why it is refused."""
        return None

    def node_at(self, address: str) -> tuple[str, Node | None]:
        """The address as the virtual host knows it, and the node the plug-in has
        there (None: look the address up as usual)."""
        return address, None

    def request_node(self, address: str) -> ManagementNode | None:
        """The request/response node of the plug-in's at ``address`` as the peer wrote it."""
        return None

    def request_nodes(self) -> Iterable[ManagementNode]:
        """The request/response nodes it made for this connection."""
        return ()

    def consumer_view(self, link: Sender, source: Source, queue: Queue) -> ConsumerView | None:
        """What a consumer of ``queue`` sees beyond its source's filters (None: all);
        raises :class:`~.addresses.AddressError` to refuse the link."""
        return None

    def claim_elsewhere(self, link: Sender, source: Source) -> dict[Any, Any] | None:
        """The filters a consumer of a queue another worker owns asks that worker to claim
        for it (the owner picks, locks and names what they ask in its answer, which the
        link's attach answer waits for: a Service Bus session); None: nothing to claim."""
        return None

    def claimed_elsewhere(self, link: Sender, queue: Node, filters: dict[Any, Any]) -> None:
        """The owner of ``queue`` claimed for ``link``'s consumer what ``filters`` name (as
        it answered), before the link's attach answer is written."""

    def consumer(self, ctx: Amqp1Context, link: Sender, queue: Queue | Stream | NodeElsewhere, *, browse: bool) -> LinkConsumer:
        """The consumer for a link that consumes from ``queue``."""
        return LinkConsumer(ctx, link, queue, browse=browse)

    def link_gone(self, link: Link) -> None:
        """A link detached."""

    def tick(self) -> None:
        """Once a second: run out what has a time limit (tokens)."""


NO_PLUGIN = Amqp1Plugin()
"""The plug-in that adds nothing (it holds no state: one serves every connection)."""
