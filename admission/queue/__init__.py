"""The queue manager: Workloads waiting for a domain, parked until what they wait for changes.

Pure state and decisions, fed by the controller's cache (or the simulator's cluster), so the
controller and the simulator re-decide the same Workloads at the same moments.
"""

from admission.queue._preempt import Candidate, Gang, Plan, QueueRules, plan_preemption
from admission.queue._room import Need, WaitingRoom
from admission.queue._seeing import NO_HINTS, REASONS, SIZE_BANDS, Block, Held, QueueHints, draining_domains, largest_block, plain_reason, size_band

__all__ = ["NO_HINTS", "REASONS", "SIZE_BANDS", "Block", "Candidate", "Gang", "Held", "Need", "Plan", "QueueHints", "QueueRules",
           "WaitingRoom", "draining_domains", "largest_block", "plain_reason", "plan_preemption", "size_band"]
