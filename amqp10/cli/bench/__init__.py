"""``amqp10 bench``: throughput and latency of a broker under N producers and M consumers."""
