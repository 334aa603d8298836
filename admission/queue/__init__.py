"""The queue manager: Workloads waiting for a domain, parked until what they wait for changes.

Pure state and decisions, fed by the controller's cache (or the simulator's cluster), so the
controller and the simulator re-decide the same Workloads at the same moments.
"""

from admission.queue._room import Need, WaitingRoom
from admission.queue._seeing import NO_HINTS, REASONS, SIZE_BANDS, Block, Held, QueueHints, draining_domains, largest_block, plain_reason, size_band

__all__ = ["NO_HINTS", "REASONS", "SIZE_BANDS", "Block", "Held", "Need", "QueueHints", "WaitingRoom", "draining_domains",
           "largest_block", "plain_reason",
           "size_band"]
