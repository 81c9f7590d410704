"""Message groups: the messages of one group go to one consumer of a queue at a time.

A message's group is its :attr:`~amqp10.broker.core.message.QueuedMessage.group`
(1.0 ``properties.group-id``, read once). The first consumer to take a message
of a group owns the group; from then on a queue's take skips that group's
messages for every other consumer (they stay where they are, in order, not
lost), until the owner leaves the queue: then the group is free, and the next
consumer that takes one of its messages owns it. Since a queue is FIFO and a
released message goes back to its place by arrival, a group's messages reach
their owner in the order they were published (``group-sequence`` order, for a
publisher that numbers them so). Messages with no group are not affected.

A queue makes its table on the first grouped message it sees; until then its
take has nothing more to check.
"""

from __future__ import annotations

from .message import QueuedMessage

__all__ = ["MessageGroups"]


class MessageGroups:
    """Which consumer (by id) owns which group of one queue, and how many of each group's
    messages are out (delivered, not yet settled).

    A group whose owner has left stays closed to everyone while any of its messages is
    still out (a lost link's unsettled messages come back to their place first, so the
    next owner gets them in order); it is free once they are all settled or back.
    """

    __slots__ = ("_orphans", "_out", "owners", "shared")

    def __init__(self, shared: bool = False) -> None:
        self.shared = shared
        """Qpid's shared groups (``qpid.shared_msg_group``): a group is its owner's only while
        the owner holds one of its messages unsettled; free once none is out."""
        self.owners: dict[str, int] = {}
        self._out: dict[str, int] = {}
        self._orphans: set[str] = set()  # owner gone, messages still out

    def allows(self, consumer_id: int, msg: QueuedMessage) -> bool:
        """Whether the consumer ``consumer_id`` may take ``msg`` (its group is free or its own)."""
        group = msg.group
        if group is None:
            return True
        owner = self.owners.get(group)
        return owner is None or (owner == consumer_id and group not in self._orphans)

    def taken(self, consumer_id: int, msg: QueuedMessage) -> None:
        """The consumer took ``msg``: it owns the message's group from now on. A take with
        no consumer (id 0: 0-9-1's basic.get) owns it only until the message is settled."""
        group = msg.group
        if group is not None:
            self.owners.setdefault(group, consumer_id)
            self._out[group] = self._out.get(group, 0) + 1
            if not consumer_id:
                self._orphans.add(group)

    def settled(self, msg: QueuedMessage) -> bool:
        """``msg`` (taken before) was settled or came back; return whether its group is free now."""
        group = msg.group
        if group is None:
            return False
        out = self._out.get(group, 0) - 1
        if out > 0:
            self._out[group] = out
            return False
        self._out.pop(group, None)
        if self.shared:
            self._orphans.discard(group)
            return self.owners.pop(group, None) is not None
        if group in self._orphans:
            self._orphans.discard(group)
            del self.owners[group]
            return True
        return False

    def release_owner(self, consumer_id: int) -> bool:
        """The consumer left the queue: its groups are free, or will be once their messages
        still out are settled; return whether any is free now."""
        freed = False
        for g in [g for g, owner in self.owners.items() if owner == consumer_id]:
            if self._out.get(g):
                self._orphans.add(g)
            else:
                del self.owners[g]
                freed = True
        return freed
