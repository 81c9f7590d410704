"""The broker on several cores: worker processes, the nodes each owns, the internal links between them.

- :mod:`.ownership`: which worker owns a node (a stable hash of vhost and name, with overrides);
- :mod:`.link`: an internal link, one AMQP 1.0 connection between two workers over a Unix
  socket, spoken by our own engine, carrying message records (the bytes as they arrived);
- :mod:`.remote`: the publishing and consuming side, a :class:`~.remote.RemoteNode` that
  stands in for a node another worker owns;
- :mod:`.owner`: the owning side, which serves its nodes to the links of other workers;
- :mod:`.supervisor`: the parent process: binds the ports once, forks the workers,
  restarts one that dies, stops them all on SIGTERM/SIGINT;
- :mod:`.control`, :mod:`.whole`: management of the whole broker: the worker that takes a
  request asks the others over control links and merges their answers;
- :mod:`.counters`: the connection counts and resident sizes every worker shares, for the
  connection limits and the memory alarm of the whole broker;
- :mod:`.handover`: a client connection (AMQP 1.0, 0-9-1) moved to the worker that owns
  its queue (``move_connections``), its socket passed over a Unix socket and replayed there.
"""
