"""The queue manager: Workloads waiting for a domain, parked until what they wait for changes.

Pure state and decisions, fed by the controller's cache (or the simulator's cluster), so the
controller and the simulator re-decide the same Workloads at the same moments.
"""

from admission.queue._room import Need, WaitingRoom

__all__ = ["Need", "WaitingRoom"]
from admission.queue._estimate import DomainOutlook, Estimate, Running, RuntimeEstimator, domain_outlook, soonest
from admission.queue._outlook import Outlook
from admission.queue._reserve import Reservation, Reservations, choose_target, restore
from admission.queue._waitspan import WaitOrSpan, weigh

__all__ += ["DomainOutlook", "Estimate", "Outlook", "Reservation", "Reservations", "Running", "RuntimeEstimator", "WaitOrSpan",
            "choose_target", "domain_outlook", "restore", "soonest", "weigh"]
__all__.sort()
