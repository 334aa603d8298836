"""``atoll run``: the admission-check controller against a cluster.

Flags win over environment variables (``ATOLL_*``, as the Helm chart sets them), which win over
defaults. Decision records go to stdout (one JSON object per line) whatever --log-level says; other
logs go to stderr, filtered by it.

The module runs past 400 lines, and ``parser`` past 60, because every setting an operator can give
``atoll run`` is declared here once, flag and environment variable side by side, and
``build_settings`` maps each to its settings field; split by theme, a new setting would need
edits in several places and the flag-over-variable rule would be repeated in each.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from admission.cli._args import Parser
from admission.controller import ConfigSettings, CostSettings, DecisionSettings, KueueSettings, ServeSettings, Settings
from admission.kube import LeaderSettings
from admission.webhook import WebhookSettings
from topology import LINK_MODELS

__all__ = ["add_cost_args", "build_settings", "build_webhook_settings", "configure_logging", "cost_settings", "credentials_error", "default_bind",
           "default_namespace", "link_model", "main", "parser", "port_or_off"]

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def credentials_error(prog: str, kubeconfig: str | None, exc: Exception) -> str:
    """One line for credentials that did not load: which source was tried, what was wrong with
    it (a YAML error by line and column, not the client's quoted document) and what to give."""
    import yaml

    from topology import describe_yaml_error

    where = kubeconfig or "in-cluster, then ~/.kube/config"
    if kubeconfig and not Path(kubeconfig).expanduser().exists():
        problem = "no such file"
    elif isinstance(exc, yaml.YAMLError):
        problem = describe_yaml_error(exc)
    else:
        problem = " ".join(str(exc).split()).rstrip(".")
    return f"{prog}: cannot load cluster credentials ({where}): {problem}; give a kubeconfig file with --kubeconfig or $KUBECONFIG"


def default_namespace(env: Mapping[str, str]) -> str:
    """$ATOLL_NAMESPACE, else the pod's own namespace, else atoll-system."""
    if env.get("ATOLL_NAMESPACE"):
        return env["ATOLL_NAMESPACE"]
    try:
        return _SA_NAMESPACE.read_text().strip() or "atoll-system"
    except OSError:
        return "atoll-system"


def port_or_off(text: str) -> int | None:
    """A port flag's value: 0-65535 (0 = any free port), or ``off``."""
    if text.strip().lower() == "off":
        return None
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give 1-65535, 0 for any free port, or off") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: give 1-65535, 0 for any free port, or off")
    return port


def share(text: str) -> float:
    """A ``--cost-*`` flag's value (or its ``ATOLL_COST_*`` variable's): a share in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share: give a number in [0, 1] (e.g. 0.1)")
    return value


def link_model(text: str) -> str:
    """A ``--link-model`` value (or ``ATOLL_LINK_MODEL``'s): one of ``topology.LINK_MODELS``."""
    if text not in LINK_MODELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a link model: give {' or '.join(LINK_MODELS)}")
    return text


def add_cost_args(p: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """The span-cost flags, each defaulting to its ``ATOLL_*`` variable. ``atoll run`` prices with
    them, and ``atoll explain`` and ``atoll queue`` take the same flags and variables, so that
    given the controller's environment they price a span as the controller does."""
    c = p.add_argument_group("span cost", "what a span costs a Workload when a profile weighs waiting against spanning "
                             "(queueing.waitOrSpan); the defaults are atoll simulate's")
    c.add_argument("--link-model", type=link_model, default=env.get("ATOLL_LINK_MODEL", "calibrated"),
                   help="how a placement's all-reduce is priced: calibrated (NCCL's algorithms on aggregated rails) or flat-ring "
                        "(one rail, the pessimistic end) (env ATOLL_LINK_MODEL)")
    c.add_argument("--cost-comm-fraction", type=share,
                   default=env.get("ATOLL_COST_COMM_FRACTION", "0.1"),
                   help="share of a multi-GPU Workload's ideal step spent in all-reduce (default 0.1; env ATOLL_COST_COMM_FRACTION)")
    c.add_argument("--cost-overlap", type=share, default=env.get("ATOLL_COST_OVERLAP", "0"),
                   help="share of that all-reduce hidden behind compute (default 0: none; env ATOLL_COST_OVERLAP)")


def cost_settings(args: argparse.Namespace) -> CostSettings:
    """The span-cost settings the flags of ``add_cost_args`` give."""
    return CostSettings(link_model=args.link_model, comm_fraction=args.cost_comm_fraction, overlap=args.cost_overlap)


def write_workers(text: str) -> int:
    """``--write-workers`` (or ``ATOLL_WRITE_WORKERS``): decision writes in flight at once, 0 to 32."""
    if not text.strip().isdigit() or int(text) > 32:
        raise argparse.ArgumentTypeError(f"{text!r} is not a write-worker count: give a whole number from 0 to 32 (e.g. 4)")
    return int(text)


def _seconds(text: str, what: str, example: str, *, zero_ok: bool) -> float:
    """A finite number of seconds, above 0 (or 0 too when ``zero_ok``), else one line naming ``what``."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 <= value if zero_ok else 0 < value) or value == float("inf"):
        bound = "0 or more" if zero_ok else "above 0"
        raise argparse.ArgumentTypeError(f"{text!r} is not a {what}: give seconds, {bound} (e.g. {example})")
    return value


def hold_seconds(text: str) -> float:
    """``--before-quota-hold`` (or ``ATOLL_BEFORE_QUOTA_HOLD``): seconds, above 0."""
    return _seconds(text, "hold", "30", zero_ok=False)


def yield_seconds(text: str) -> float:
    """``--quota-yield-max-seconds`` (or ``ATOLL_QUOTA_YIELD_MAX_SECONDS``): seconds, above 0."""
    return _seconds(text, "bound", "43200 for 12 h", zero_ok=False)


def lead_seconds(text: str) -> float:
    """``--quota-yield-turn-lead-seconds`` (or ``ATOLL_QUOTA_YIELD_TURN_LEAD_SECONDS``): seconds, 0 or more."""
    return _seconds(text, "lead time", "3600 for 1 h", zero_ok=True)


def settle_seconds(text: str) -> float:
    """``--before-quota-settle`` (or ``ATOLL_BEFORE_QUOTA_SETTLE``): seconds, 0 or more."""
    return _seconds(text, "settle time", "1", zero_ok=True)


def before_quota_depth(text: str) -> int:
    """``--before-quota-depth`` (or ``ATOLL_BEFORE_QUOTA_DEPTH``): Workloads per ClusterQueue, 1 to 64."""
    if not text.strip().isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a depth: give a whole number from 1 to 64 (e.g. 2)")
    return int(text)


def park_default(text: str) -> bool | None | str:
    """``ATOLL_PARK_WAITING``: ``true`` or ``false`` overrides every profile's ``queueing.parkWaiting``;
    ``profile`` or unset follows it. Anything else is kept as given, for ``main`` to refuse."""
    return {"true": True, "false": False, "profile": None, "": None}.get(text.strip().lower(), text)


def default_bind(env: Mapping[str, str]) -> str:
    """All addresses inside a pod (the kubelet probes the pod's IP), else loopback only."""
    return "0.0.0.0" if env.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"


def parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    env = os.environ if env is None else env
    p = Parser(prog="atoll run", description="Run Atoll's Kueue admission-check controller.")
    p.add_argument("--kubeconfig", default=env.get("KUBECONFIG") or None, help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--namespace", default=default_namespace(env), help="namespace of the profiles ConfigMap and the leader Lease "
                   "(default: $ATOLL_NAMESPACE, else the pod's namespace, else atoll-system)")
    p.add_argument("--configmap", default=env.get("ATOLL_CONFIGMAP", "atoll-policies"), help="profiles ConfigMap (key profiles.yaml)")
    p.add_argument("--admission-check", default=env.get("ATOLL_ADMISSION_CHECK", "atoll-topology"),
                   help="AdmissionCheck to serve; '*' serves every check whose controllerName is atoll.dev/topology")
    p.add_argument("--gpu-resource", default=env.get("ATOLL_GPU_RESOURCE", "nvidia.com/gpu"))
    p.add_argument("--metrics-port", type=port_or_off, default=port_or_off(env.get("ATOLL_METRICS_PORT", "8080")),
                   help="port of /metrics; 0 = any free port (logged at start), off = not served")
    p.add_argument("--health-port", type=port_or_off, default=port_or_off(env.get("ATOLL_HEALTH_PORT", "8081")),
                   help="port of /healthz, /readyz and /leader; 0 = any free port (logged at start), off = not served")
    p.add_argument("--bind-address", default=env.get("ATOLL_BIND_ADDRESS") or default_bind(env),
                   help="address the metrics and health ports listen on (default: all addresses in a pod, else 127.0.0.1, so a "
                        "controller run from a laptop does not publish its metrics)")
    p.add_argument("--metrics-secure", action=argparse.BooleanOptionalAction, default=env.get("ATOLL_METRICS_SECURE", "false") == "true",
                   help="serve /metrics over HTTPS to scrapes whose bearer token a TokenReview accepts and a SubjectAccessReview "
                        "allows to get /metrics (the chart turns it on)")
    p.add_argument("--metrics-cert-dir", default=env.get("ATOLL_METRICS_CERT_DIR") or None,
                   help="tls.crt and tls.key for --metrics-secure (default: a self-signed certificate made at start)")
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=env.get("ATOLL_LEADER_ELECT", "true") != "false",
                   help="elect a leader on a Lease (default on; the chart runs 2 replicas)")
    p.add_argument("--lease-name", default=env.get("ATOLL_LEASE_NAME", "atoll-controller"))
    p.add_argument("--warm-standby", action=argparse.BooleanOptionalAction, default=env.get("ATOLL_WARM_STANDBY", "true") != "false",
                   help="a standby watches the cluster and compiles its kernels before it leads, so a failover needs no "
                        "relist (default on; off starts everything at takeover)")
    p.add_argument("--identity", default=env.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}", help="leader-election identity")
    p.add_argument("--park-waiting", action=argparse.BooleanOptionalAction, default=park_default(env.get("ATOLL_PARK_WAITING", "")),
                   help="for every profile, a Workload waiting for a domain keeps the check Pending (Kueue keeps its quota) and is "
                        "decided again when room frees, instead of a Retry on the profile's backoff; --no-park-waiting: never. "
                        "Unset: each profile as its queueing.parkWaiting says (env ATOLL_PARK_WAITING: true, false or profile)")
    p.add_argument("--quota-yield-max-seconds", type=yield_seconds,
                   default=env.get("ATOLL_QUOTA_YIELD_MAX_SECONDS", str(DecisionSettings().quota_yield_max_seconds)),
                   help="the longest a parked Workload that gave its quota back stays deactivated, in seconds (default 43200: "
                        "12 h); it comes back sooner once no Workload queued before the give waits for quota "
                        "(env ATOLL_QUOTA_YIELD_MAX_SECONDS)")
    p.add_argument("--quota-yield-back-when-fits", action="store_true",
                   help="an event that reaches a parked Workload that gave its quota back drops its need only if the placement "
                        "it was parked on fits now; otherwise it comes back only when it can use the quota it takes (default: "
                        "any such event drops the need)")
    p.add_argument("--quota-yield-in-turn", action="store_true",
                   help="freed room counts the Workloads that gave their quota back after the parked ones, one parked again "
                        "undecided may give its quota back again, and the oldest gang parked for a reservation keeps its quota "
                        "(default: every such Workload the room could hold alone is reached, and one give per decision)")
    p.add_argument("--quota-yield-turn-lead-seconds", type=lead_seconds, default=env.get("ATOLL_QUOTA_YIELD_TURN_LEAD_SECONDS"),
                   help="the first Workload in line for a reservation of its flavor keeps its quota from this many seconds "
                        "before the soonest reservation of its flavor is expected free, and parked Workloads give theirs to it "
                        "(default: unset, it gives like any parked Workload; env ATOLL_QUOTA_YIELD_TURN_LEAD_SECONDS)")
    p.add_argument("--write-workers", type=write_workers, default=env.get("ATOLL_WRITE_WORKERS", "0"),
                   help="decision writes in flight at once: the next decision is made while earlier ones are written "
                        "(0: each is written before the next is made; env ATOLL_WRITE_WORKERS)")
    p.add_argument("--decide-before-quota", action=argparse.BooleanOptionalAction,
                   default=env.get("ATOLL_DECIDE_BEFORE_QUOTA", "false") == "true",
                   help="decide a Workload queued in a ClusterQueue of one Atoll flavor before Kueue reserves its quota, so that "
                        "Kueue admits it in the reservation's own write (env ATOLL_DECIDE_BEFORE_QUOTA)")
    p.add_argument("--before-quota-hold", type=hold_seconds, default=env.get("ATOLL_BEFORE_QUOTA_HOLD", "30"),
                   help="seconds a decision made before quota holds its domain; a Workload still without quota then is set "
                        "back to Pending (env ATOLL_BEFORE_QUOTA_HOLD)")
    p.add_argument("--before-quota-depth", type=before_quota_depth, default=env.get("ATOLL_BEFORE_QUOTA_DEPTH", "2"),
                   help="Workloads per ClusterQueue holding a decision made before quota at once, the first in Kueue's order "
                        "(env ATOLL_BEFORE_QUOTA_DEPTH)")
    p.add_argument("--before-quota-settle", type=settle_seconds, default=env.get("ATOLL_BEFORE_QUOTA_SETTLE", "1"),
                   help="seconds a Workload must have been seen waiting for quota before it is decided early (0: at first "
                        "sight); Kueue reserves from its own copy, and one older than the decision writes it back to Pending "
                        "(env ATOLL_BEFORE_QUOTA_SETTLE)")
    p.add_argument("--before-quota-list-own", action=argparse.BooleanOptionalAction,
                   default=env.get("ATOLL_BEFORE_QUOTA_LIST_OWN", "false") == "true",
                   help="with --decide-before-quota: decide a Workload holding quota before Kueue has listed Atoll's check "
                        "on it, and write the entry with the decision (env ATOLL_BEFORE_QUOTA_LIST_OWN)")
    add_cost_args(p, env)
    p.add_argument("--log-level", default=env.get("ATOLL_LOG_LEVEL", "info"), choices=("debug", "info", "warning", "error"))
    w = p.add_argument_group("exact-placement webhook", "pins each pod of a Workload placed under enforcement: exact to a planned node")
    w.add_argument("--webhook-port", type=int, default=int(env.get("ATOLL_WEBHOOK_PORT", "0")),
                   help="HTTPS port of POST /mutate-pods; 0 = no webhook (the chart uses 9443)")
    w.add_argument("--webhook-cert-dir", default=env.get("ATOLL_WEBHOOK_CERT_DIR", WebhookSettings().cert_dir),
                   help="directory with tls.crt and tls.key (written there with --webhook-generate-certs)")
    w.add_argument("--webhook-generate-certs", action=argparse.BooleanOptionalAction,
                   default=env.get("ATOLL_WEBHOOK_GENERATE_CERTS", "false") == "true",
                   help="make a self-signed CA and serving certificate at start when the directory has none, "
                        "and put the CA into the caBundle of --webhook-config")
    w.add_argument("--webhook-service", default=env.get("ATOLL_WEBHOOK_SERVICE", "atoll-webhook"),
                   help="Service the apiserver calls (the generated certificate names it)")
    w.add_argument("--webhook-namespace", default=env.get("ATOLL_WEBHOOK_NAMESPACE") or None,
                   help="namespace of that Service (default: --namespace)")
    w.add_argument("--webhook-config", default=env.get("ATOLL_WEBHOOK_CONFIG", "atoll-webhook"),
                   help="MutatingWebhookConfiguration whose caBundle gets the generated CA")
    w.add_argument("--webhook-timeout-seconds", type=int,
                   default=int(env.get("ATOLL_WEBHOOK_TIMEOUT_SECONDS", str(WebhookSettings().timeout_seconds))),
                   help="timeoutSeconds of that configuration (1-30); the webhook's API calls and their retries end within it")
    w.add_argument("--accelerator-resources", default=env.get("ATOLL_ACCELERATOR_RESOURCES", ""),
                   help="comma-separated accelerator resources the webhook counts as GPUs besides --gpu-resource: "
                        "those the profiles document's flavors name (gpuResource), e.g. amd.com/gpu,habana.ai/gaudi")
    return p


def build_settings(args: argparse.Namespace) -> Settings:
    return Settings(
        kueue=KueueSettings(admission_check=None if args.admission_check in ("*", "") else args.admission_check,
                            gpu_resource=args.gpu_resource),
        config=ConfigSettings(namespace=args.namespace, configmap=args.configmap),
        leader=LeaderSettings(enabled=args.leader_elect, lease_name=args.lease_name, identity=args.identity),
        serve=ServeSettings(metrics_port=args.metrics_port, health_port=args.health_port, bind_address=args.bind_address,
                            metrics_secure=args.metrics_secure),
        decisions=DecisionSettings(park_waiting=args.park_waiting, quota_yield_max_seconds=args.quota_yield_max_seconds,
                                   quota_yield_back_when_fits=args.quota_yield_back_when_fits,
                                   quota_yield_in_turn=args.quota_yield_in_turn,
                                   quota_yield_turn_lead_seconds=args.quota_yield_turn_lead_seconds,
                                   write_workers=args.write_workers,
                                   decide_before_quota=args.decide_before_quota, before_quota_hold_seconds=args.before_quota_hold,
                                   before_quota_depth=args.before_quota_depth, before_quota_settle_seconds=args.before_quota_settle,
                                   before_quota_list_own=args.before_quota_list_own),
        cost=cost_settings(args),
    )


def build_webhook_settings(args: argparse.Namespace) -> WebhookSettings:
    """The webhook's settings; pydantic's ValidationError names the bad field."""
    return WebhookSettings(port=args.webhook_port, cert_dir=args.webhook_cert_dir, generate_certs=args.webhook_generate_certs,
                           service=args.webhook_service, namespace=args.webhook_namespace or args.namespace,
                           config=args.webhook_config, gpu_resource=args.gpu_resource, timeout_seconds=args.webhook_timeout_seconds,
                           accelerators=tuple(a.strip() for a in args.accelerator_resources.split(",") if a.strip()))


_WEBHOOK_FLAGS = {"port": "--webhook-port", "cert_dir": "--webhook-cert-dir", "generate_certs": "--webhook-generate-certs",
                  "service": "--webhook-service", "namespace": "--webhook-namespace", "config": "--webhook-config",
                  "gpu_resource": "--gpu-resource", "timeout_seconds": "--webhook-timeout-seconds",
                  "accelerators": "--accelerator-resources"}
"""The webhook setting each ``atoll run`` flag fills, to name the flag a bad value came from."""


def _webhook_flag_errors(exc: ValueError) -> list[str]:
    """One line per bad webhook flag, naming the flag and what to give instead."""
    if not isinstance(exc, ValidationError):
        return [f"atoll run: webhook flags: {exc}"]
    from topology import describe_validation_error

    lines = []  # what the flag takes in plain words ("expected a number ≥ 0, got -3"), as the documents' errors say it
    for problem, text in zip(exc.errors(), describe_validation_error("-", exc).splitlines(), strict=True):
        field = str(problem["loc"][0]) if problem["loc"] else ""
        flag = _WEBHOOK_FLAGS.get(field, field or "webhook flags")
        said = text.removeprefix("-: ")
        lines.append(f"atoll run: {flag}: {said.removeprefix(f'{field}: ') if len(problem['loc']) == 1 else said}")
    return lines


def configure_logging(level: str) -> None:
    """JSON log lines on stderr (stdout carries the decision records)."""
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.format_exc_info, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),  # the stream of the moment, not of start-up
    )


def _secure_metrics(args: argparse.Namespace, port: Any) -> dict[str, Any]:
    """HTTPS and the TokenReview/SubjectAccessReview check for ``/metrics``. Without
    --metrics-cert-dir a self-signed certificate is made at start (scrapers verify the token's
    holder, not the server: Prometheus' in-cluster scrape configs skip server verification)."""
    import ssl
    import tempfile

    from admission.controller import MetricsAuthorizer
    from admission.webhook import ensure_serving_cert

    cert_dir = args.metrics_cert_dir or tempfile.mkdtemp(prefix="atoll-metrics-")
    cert = ensure_serving_cert(cert_dir, ["localhost", socket.gethostname()], generate=args.metrics_cert_dir is None)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert.cert_file), str(cert.key_file))
    return {"tls": context, "authorize": MetricsAuthorizer(port)}


def main(argv: Sequence[str], stop: threading.Event | None = None) -> int:
    args = parser().parse_args(list(argv))
    if isinstance(args.park_waiting, str):
        print(f"atoll run: ATOLL_PARK_WAITING={args.park_waiting!r}: give true, false or profile "
              "(profile: each profile's queueing.parkWaiting decides)", file=sys.stderr)
        return 2
    settings = build_settings(args)
    try:
        webhook_settings = build_webhook_settings(args)
    except ValueError as exc:
        for line in _webhook_flag_errors(exc):
            print(line, file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    log = structlog.get_logger("atoll.run")

    from admission.controller import Controller, HttpEndpoints, Metrics
    from admission.kube import KubePort, LeaderElector, api_client_from_kubeconfig
    from admission.kube.errors import ApiError

    try:
        api = api_client_from_kubeconfig(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - any config failure ends here with its message
        print(credentials_error("atoll run", args.kubeconfig, exc), file=sys.stderr)
        return 2
    port = KubePort(api, settings.api)
    elector = None
    if settings.leader.enabled:
        # the elector's own port: one attempt per call, each within the round's renew deadline
        # (its rounds, every retry period, are its retries)
        lease_port = KubePort(api, settings.api.model_copy(update={"backoffs": ()}))
        elector = LeaderElector(lease_port, namespace=settings.config.namespace, identity=args.identity, settings=settings.leader)
        lease_port.budget = elector.round_budget
    # The controller writes through a port fenced by the lease: no attempt of a write, retries
    # included, is sent or waited on past this replica's term (less a margin); the webhook uses
    # its own port: every replica serves it.
    fenced = KubePort(api, settings.api, fence=elector.write_window) if elector is not None else port
    metrics = Metrics()
    controller = Controller(fenced, settings=settings, metrics=metrics, identity=args.identity,
                            lease_term=(lambda: elector.term) if elector is not None else None)
    stop = stop or threading.Event()
    running = threading.Event()
    warm = elector is not None and args.warm_standby

    def alive() -> tuple[bool, str]:
        if not running.is_set() and not warm:
            return True, "standby"
        stalled = controller.clock.monotonic() - controller.heartbeat
        return (stalled < settings.serve.stall_seconds), f"worker loop last turned {stalled:.1f}s ago"

    def ready() -> tuple[bool, str]:
        """Ready on every replica whose caches serve: the leader and a warm standby once synced (a
        cold standby lists at takeover, so it is ready as it is); the body names the role."""
        role = "leader" if running.is_set() else "standby"
        if not running.is_set() and not warm:
            return True, "standby (cold: lists the cluster when it leads)"
        return controller.synced, f"{role}: " + ("caches synced" if controller.synced else "listing the cluster")

    def leading() -> tuple[bool, str]:
        """``/leader``: 200 only on the replica that leads and decides."""
        if not running.is_set():
            return False, "standby: another replica leads"
        return controller.synced, "leader: " + ("deciding" if controller.synced else "listing the cluster")

    webhook = None
    if webhook_settings.port:
        from admission.webhook import CertError, Webhook, review_time_left

        try:
            # its own retries: an answer must come within the webhook's timeoutSeconds, not after the controller's patience
            # and one budget per review: each attempt and wait asks what is left of it
            webhook = Webhook(KubePort(api, webhook_settings.api_retry(), deadline=review_time_left), webhook_settings,
                              watch_port=port).start()
        except (CertError, OSError) as exc:
            print(f"atoll run: webhook on port {webhook_settings.port}: {exc}", file=sys.stderr)
            return 2
    try:
        endpoints = HttpEndpoints(metrics, alive=alive, ready=ready, leader=leading, bind=settings.serve.bind_address,
                                  metrics_port=settings.serve.metrics_port, health_port=settings.serve.health_port,
                                  **_secure_metrics(args, port) if settings.serve.metrics_secure else {})
    except (OSError, ValueError, RuntimeError) as exc:  # a port taken, a certificate that cannot be made or read
        print(f"atoll run: metrics or health port: {exc}", file=sys.stderr)
        if webhook is not None:
            webhook.stop()
        return 2
    endpoints.start()
    log.info("serving", bind=settings.serve.bind_address, metrics_port=endpoints.port_of("metrics"), health_port=endpoints.port_of("health"),
             metrics_secure=settings.serve.metrics_secure)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())

    def started() -> None:
        running.set()
        metrics.leader.set(1)
        if warm:
            controller.lead()
        else:
            controller.start()

    def stopped() -> None:
        controller.stop()
        metrics.leader.set(0)
        running.clear()

    log.info("starting", identity=args.identity, namespace=settings.config.namespace, configmap=settings.config.configmap,
             admission_check=settings.kueue.admission_check or "*", leader_elect=settings.leader.enabled)
    try:
        if elector is not None:
            if warm:
                controller.start(leading=False)  # watching and warmed up, deciding once it leads
            elector.run(stop, started, stopped)
            if not stop.is_set():
                log.error("lost leadership; exiting so a fresh process campaigns again")
                return 1
        else:
            started()
            stop.wait()
            stopped()
    except ApiError as exc:
        log.error("fatal API error", error=str(exc))
        return 1
    finally:
        controller.stop()  # a standby that never led stops its watches here
        endpoints.stop()
        if webhook is not None:
            webhook.stop()
    return 0
