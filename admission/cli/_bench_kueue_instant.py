"""The control check of ``atoll bench kueue --control-check``: an AdmissionCheck controller that
does no work. It answers ``Ready`` the moment it sees its entry ``Pending`` on a Workload (with
``--when reserved``, once the Workload also holds quota), with no placement, no podSetUpdates and
no read beyond its watch, in its own process as Atoll's controller runs. Its arm shows what Kueue
charges any check (its write listing the check, the check's write, its own second reconcile and
write) apart from what Atoll's placement costs: no check can admit sooner than this one.

Each answer is one server-side apply of the entry under its own field manager, forced and without
a resourceVersion (it always lands). A ``Pending`` seen while its answer is in flight is answered
again once that write is back (Kueue's scheduler may write the entry back to ``Pending`` from an
older copy of the Workload)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from admission import vocabulary
from admission.cli._args import Parser

__all__ = ["CONTROLLER", "INSTANT_CHECK", "WHEN", "Answerer", "activate", "answer", "main"]

INSTANT_CHECK = "bench-instant"
CONTROLLER = vocabulary.BENCH_INSTANT_CONTROLLER
FIELD_MANAGER = "bench-instant-check"
WHEN = ("listed", "reserved")
"""When the control check answers: as soon as its entry is listed (before quota if Kueue lists it
first, as Atoll's early decision may), or only once the Workload holds quota."""


def _true(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def answer(obj: dict[str, Any], when: str, now: float) -> dict[str, Any] | None:
    """The status apply that sets the control check's entry of ``obj`` ``Ready``; None when the
    entry is not there, not ``Pending``, the Workload is finished or evicted, or (``when``
    ``reserved``) it holds no quota yet."""
    entry = next((a for a in (obj.get("status") or {}).get("admissionChecks") or [] if a.get("name") == INSTANT_CHECK), None)
    if entry is None or entry.get("state") != "Pending" or _true(obj, "Finished") or _true(obj, "Evicted"):
        return None
    if when == "reserved" and not _true(obj, "QuotaReserved"):
        return None
    meta = obj.get("metadata") or {}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
            "status": {"admissionChecks": [{"name": INSTANT_CHECK, "state": "Ready", "message": "answered at once",
                                            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}]}}


def _version(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Answerer:
    """Watches the Workloads of one namespace and answers each ``Pending`` entry, up to ``writers``
    writes in flight."""

    def __init__(self, port: Any, namespace: str, when: str, writers: int) -> None:
        self.port, self.namespace, self.when = port, namespace, when
        self.pool = ThreadPoolExecutor(writers)
        self.lock = threading.Lock()
        self.in_flight: set[str] = set()
        self.latest: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()
        """Set: ``run`` returns after its watch's next event or timeout (10 s)."""

    def seen(self, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata'].get('namespace')}/{obj['metadata'].get('name')}"
        with self.lock:
            self.latest[key] = obj
            if key in self.in_flight:
                return
            body = answer(obj, self.when, time.time())
            if body is None:
                return
            self.in_flight.add(key)
        self.pool.submit(self._write, key, body)

    def _write(self, key: str, body: dict[str, Any]) -> None:
        from admission.kube import WORKLOADS
        from admission.kube.errors import ApiError, NotFound

        out: dict[str, Any] = {}
        try:
            out = self.port.apply(WORKLOADS, body, field_manager=FIELD_MANAGER, subresource="status")
        except NotFound:
            pass
        except ApiError as exc:  # a loaded apiserver: the next event of this Workload tries again
            print(f"bench instant check: {key}: {exc}", file=sys.stderr, flush=True)
        with self.lock:
            self.in_flight.discard(key)
            later = self.latest.get(key)
            again = later if later is not None and _version(later) > _version(out) else None
        if again is not None:  # seen while the write was in flight: answered if still Pending
            self.seen(again)

    def run(self) -> None:
        from admission.kube import WORKLOADS
        from admission.kube.errors import Gone

        rv = ""
        while not self.stop.is_set():
            try:
                if not rv:
                    listed = self.port.list(WORKLOADS, namespace=self.namespace)
                    for obj in listed.items:
                        self.seen(obj)
                    rv = listed.resource_version
                for ev in self.port.watch(WORKLOADS, rv, namespace=self.namespace, timeout_seconds=10):
                    if self.stop.is_set():
                        break
                    rv = (ev.object.get("metadata") or {}).get("resourceVersion", rv)
                    if ev.type in ("ADDED", "MODIFIED"):
                        self.seen(ev.object)
            except Gone:  # too old a version: list again
                rv = ""
            except Exception:  # noqa: BLE001 - a dropped watch: resume from the last version seen
                time.sleep(0.2)


def activate(port: Any) -> None:
    """The control check's AdmissionCheck ``Active`` (Kueue admits through no check that is not)."""
    from admission.kube import ADMISSION_CHECKS

    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    port.apply(ADMISSION_CHECKS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": INSTANT_CHECK},
                                  "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active",
                                                             "message": "the bench's control check", "lastTransitionTime": t}]}},
               field_manager=FIELD_MANAGER, subresource="status")


def main(argv: Sequence[str]) -> int:
    from admission.kube import KubePort, api_client_from_kubeconfig

    p = Parser(prog="bench instant check", description="the control check of atoll bench kueue: answers Ready at once")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True, help="the control arm's namespace")
    p.add_argument("--when", choices=WHEN, default="listed")
    p.add_argument("--writers", type=int, default=4, help="answers in flight at once")
    args = p.parse_args(list(argv))
    port = KubePort(api_client_from_kubeconfig(args.kubeconfig))
    activate(port)
    Answerer(port, args.namespace, args.when, args.writers).run()
    return 0
