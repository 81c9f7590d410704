"""A node whose kind an attach chose, decided by the owner of its name: once, for the whole broker.

A 1.0 attach may name a node as a kind its address rules would not make it (a ``topic``
capability or the ``topic://`` prefix on a plain name; ``stream``, ``queue``). With
several workers each name has one owner (:mod:`.ownership`), and that owner decides what
the node is: a worker whose attach names a kind for a name another worker owns, and that
has no node of that name, asks the owner first (the question :data:`MAKE_NODE`, through
:meth:`VirtualHost.decide <amqp10.broker.core.VirtualHost.decide>`) and answers the
attach only once the owner answered. The owner makes the node of that kind if it has
none, or keeps the node it has (as one broker keeps an existing node's kind: a topic
attach of a queue's name gets the queue), and answers its kind (:func:`made`). A plain
attach on the owner meanwhile finds that node: the topic, not a new queue. A topic is
on every worker: the owner's making shares it (the metadata's ``topic``), and the asking
worker makes its copy at the answer, before its attach is answered.

Why at the owner, not through the metadata's order: every other making of a node by
name already happens at its owner, in the order the owner's event loop handles its
links (a plain attach on another worker reaches the owner's stand-in, which makes the
node there; one on the owner makes it at once); only a topic, made on every worker, was
made where its attach came. Through the metadata's order, every queue a plain attach
makes would have had to wait for that order too; asking the owner costs only the
attaches that name a kind other than the rules', one round trip each. The owner's answer
waits for its store, not for the order (``NodeServer._reply``'s ``ordered``): a topic
made while the parent is stopped is used at once, as it was before.
"""

from __future__ import annotations

from typing import Any

from ..core import NodeElsewhere, PartitionedStream, VirtualHost

__all__ = ["MAKE_NODE", "made"]

MAKE_NODE = "make-node"
"""The question: ``[name, kind]``; answered ``[kind]`` of the node the owner has (made
now if it had none), or ``[None]``: none it decides (no ``auto_create``, or a node on
every worker other than a topic)."""


def made(vhost: VirtualHost, args: list[Any]) -> list[Any]:
    """The owner's answer to :data:`MAKE_NODE` (sent once the node made is stored)."""
    name, kind = str(args[0]), str(args[1])
    node = vhost.lookup(name, create=True, kind=kind)
    if node is None or isinstance(node, (NodeElsewhere, PartitionedStream)):
        return [None]
    return [node.kind]
