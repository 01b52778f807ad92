"""The garbage collectors' errors: a runtime call that failed (CRI errors mapped at the edge) or a pass that could
not free what it had to. The periodic loops log them and record upstream's events; the eviction manager logs them
and goes on to evict."""

from __future__ import annotations


class GCError(RuntimeError):
    """Base of the garbage collectors' errors."""


class ImageGCError(GCError):
    """An image GC pass failed: listing, stats, a removal, or too little freed (the message says which)."""


class ContainerGCError(GCError):
    """A container GC pass could not list the runtime's containers or sandboxes."""
