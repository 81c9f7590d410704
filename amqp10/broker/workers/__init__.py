"""The broker on several cores: worker processes, the nodes each owns, the internal links between them.

- :mod:`.ownership`: which worker owns a node (a stable hash of vhost and name, with overrides);
- :mod:`.link`: an internal link, one AMQP 1.0 connection between two workers over a Unix
  socket, spoken by our own engine, carrying message records (the bytes as they arrived);
- :mod:`.remote`: the publishing and consuming side, a :class:`~.remote.RemoteNode` that
  stands in for a node another worker owns;
- :mod:`.owner`: the owning side, which serves its nodes to the links of other workers.
"""
