"""``amqp10 bench``: throughput and latency of a broker under N producers and M consumers.

:mod:`~amqp10.cli.bench.harness` runs a workload and measures it (a library:
``bench/compare.py`` drives other clients and brokers with it),
:mod:`~amqp10.cli.bench.worker` is the producer or consumer process it starts,
and :mod:`~amqp10.cli.bench.command` is the command line and its summary.
"""
