"""The queue manager: Workloads waiting for a domain, parked until what they wait for changes.

Pure state and decisions, fed by the controller's cache (or the simulator's cluster), so the
controller and the simulator re-decide the same Workloads at the same moments.
"""

from admission.queue._ahead import MAX_AHEAD, Queued, QueuedStart, Waiter, queued_start
from admission.queue._estimate import DomainOutlook, Estimate, Running, RuntimeEstimator, domain_outlook, soonest
from admission.queue._lend import fits_now, settle_givers
from admission.queue._linecost import QueueCost, span_queue_cost
from admission.queue._outlook import Outlook
from admission.queue._owed import OwedGang, OwedGangs, ends_before_gang, gang_start
from admission.queue._preempt import Candidate, Gang, Plan, QueueRules, plan_preemption
from admission.queue._reserve import Reservation, Reservations, choose_target, free_at, should_move
from admission.queue._room import Need, WaitingRoom
from admission.queue._seeing import NO_HINTS, REASONS, SIZE_BANDS, Block, Held, QueueHints, draining_domains, largest_block, plain_reason, size_band
from admission.queue._waitspan import SpanPrices, WaitOrSpan, span_stamp, wait_basis, weigh
from admission.queue._wake import wake_freed, wake_released, wake_suspended

__all__ = [
    "MAX_AHEAD",
    "NO_HINTS",
    "REASONS",
    "SIZE_BANDS",
    "Block",
    "Candidate",
    "DomainOutlook",
    "Estimate",
    "Gang",
    "Held",
    "Need",
    "Outlook",
    "OwedGang",
    "OwedGangs",
    "Plan",
    "QueueCost",
    "QueueHints",
    "QueueRules",
    "Queued",
    "QueuedStart",
    "Reservation",
    "Reservations",
    "Running",
    "RuntimeEstimator",
    "SpanPrices",
    "WaitOrSpan",
    "Waiter",
    "WaitingRoom",
    "choose_target",
    "domain_outlook",
    "draining_domains",
    "ends_before_gang",
    "fits_now",
    "free_at",
    "gang_start",
    "largest_block",
    "plain_reason",
    "plan_preemption",
    "queued_start",
    "settle_givers",
    "should_move",
    "size_band",
    "soonest",
    "span_queue_cost",
    "span_stamp",
    "wait_basis",
    "wake_freed",
    "wake_released",
    "wake_suspended",
    "weigh",
]
