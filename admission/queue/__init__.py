"""The queue manager: Workloads waiting for a domain, parked until what they wait for changes.

Pure state and decisions, fed by the controller's cache (or the simulator's cluster), so the
controller and the simulator re-decide the same Workloads at the same moments.
"""

from admission.queue._room import Need, WaitingRoom

__all__ = ["Need", "WaitingRoom"]
