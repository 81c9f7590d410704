"""SASL layer (sans-IO): client and server mechanisms, credentials."""
