"""The sans-IO AMQP 0-9-1 engine (with the 0-9 and 0-8 dialects).

Codec: ``methods`` (generated from the spec XML), ``fields`` (field tables),
``framing`` (frames), ``dialects`` (0-9 and 0-8 as difference tables),
``negotiate`` (which protocol a connection's first 8 bytes ask for).
"""

from __future__ import annotations
