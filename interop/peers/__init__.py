"""Server peers of the interop matrix: our broker, the Proton broker, RabbitMQ, ActiveMQ."""
