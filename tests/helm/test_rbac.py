"""RBAC for real: an apiserver authorizing with RBAC, the chart's ServiceAccount, ClusterRole, Role
and bindings applied as rendered, and ``atoll run`` with a token bound to that ServiceAccount
(TokenRequest, as the kubelet mounts it in the pod). Kueue's part is played with an admin token.
The admission scenario passes; the webhook, called by the apiserver through the chart's own
MutatingWebhookConfiguration and reading and writing with that token, pins pods (claims Lease),
answers dry runs without writing, and marks a Workload the controller then requeues; what Atoll
must never do is answered 403."""

from __future__ import annotations

import base64
import copy
import io
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.cli._run import main as run_main
from admission.controller import REQUEUE_CONDITION, ConfigSettings, Controller, KueueSettings, Recorder, Settings
from admission.kube import KubePort
from admission.webhook import MUTATE_PATH, PodPinner, WebhookServer, WebhookSettings, ensure_serving_cert, review_time_left
from tests.admission.fabric import BLOCK, CLIQUE, POOL, Fabric, planned, profiles_doc, run
from tests.admission.webhook.conftest import bind, create, fail, kueue_pod, pinned_node, settle
from tests.conftest import control_plane
from tests.envtest import ApiServer, install_kueue_crds
from tests.helm.chart import apply, by_kind, for_server, render
from tests.kube_objects import GROUP, VERSION, cluster_queue, local_queue, resource_flavor, topology

pytestmark = pytest.mark.apiserver

RELEASE, RELEASE_NS, TEAM_NS = "prod", "atoll-system", "team-rbac"
SA = "prod-atoll"
CLAIMS = WebhookSettings().claims_lease


class Installed:
    def __init__(self, server: ApiServer, admin: Any, fabric: Fabric, objects: list[dict[str, Any]], atoll: Any, kubeconfig: Path) -> None:
        self.server, self.admin, self.fabric, self.objects, self.atoll, self.kubeconfig = server, admin, fabric, objects, atoll, kubeconfig


def _kubeconfig(server: ApiServer, token: str, path: Path) -> Path:
    config = yaml.safe_load(server.kubeconfig_path.read_text())
    config["users"][0]["user"]["token"] = token
    path.write_text(yaml.safe_dump(config))
    return path


def _client(server: ApiServer, token: str) -> Any:
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert, cfg.verify_ssl = server.host, str(server.ca_file), True
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    binaries, crds = control_plane()
    with ApiServer(binaries, rbac=True) as server:
        admin = server.api_client()
        install_kueue_crds(admin, crds)
        core = client.CoreV1Api(admin)
        for ns in (RELEASE_NS, TEAM_NS):
            core.create_namespace({"metadata": {"name": ns}})
        fabric = Fabric(admin, TEAM_NS)
        fabric.add_nodes()
        custom = fabric.custom
        custom.create_cluster_custom_object(GROUP, VERSION, "topologies", topology(fabric.topology, [BLOCK, CLIQUE]))
        custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", resource_flavor(fabric.flavor, {POOL: TEAM_NS}))
        custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(fabric.cq, fabric.flavor, 1000, fabric.check))
        custom.create_namespaced_custom_object(GROUP, VERSION, TEAM_NS, "localqueues", local_queue(TEAM_NS, "lq", fabric.cq))
        # the chart as a user installs it; only the AdmissionCheck's name and the profiles match this fabric
        # the webhook forced on: the profiles start under domain enforcement and a test switches them to exact;
        # parking off, the tightest role: by default a profile may park, and the role may then also patch a
        # Workload's spec.active (test_chart.py::test_only_parking_lets_atoll_patch_a_workload)
        values = {"admissionCheck": {"name": fabric.check}, "profiles": {"document": yaml.safe_dump(profiles_doc(fabric.flavor, fabric.topology))},
                  "webhook": {"enabled": True}, "parkWaiting": False}
        objects = render(for_server(admin, values), release=RELEASE, namespace=RELEASE_NS)
        for obj in objects:
            apply(admin, obj)
        token = core.create_namespaced_service_account_token(SA, RELEASE_NS, {"spec": {"expirationSeconds": 3600}}).status.token
        tmp = tmp_path_factory.mktemp("rbac")
        yield Installed(server, admin, fabric, objects, _client(server, token), _kubeconfig(server, token, tmp / "kubeconfig"))


def test_the_token_is_the_charts_service_account(installed: Installed) -> None:
    review = client.AuthenticationV1Api(installed.admin).create_token_review(
        {"spec": {"token": installed.atoll.configuration.api_key["authorization"].removeprefix("Bearer ")}})
    assert review.status.authenticated and review.status.user.username == f"system:serviceaccount:{RELEASE_NS}:{SA}"
    [binding] = by_kind(installed.objects, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA, "namespace": RELEASE_NS}]


def test_atoll_run_admits_a_workload_with_only_the_charts_permissions(installed: Installed) -> None:
    fabric = installed.fabric
    [deployment] = by_kind(installed.objects, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    # the chart's own flags; the webhook's serving is another test's subject (its RBAC is checked below)
    argv = [a for a in container["args"][1:] if not a.startswith("--webhook")]
    argv += ["--kubeconfig", str(installed.kubeconfig), "--metrics-port", "0", "--health-port", "0", "--identity", "rbac-replica"]
    stop = threading.Event()
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(run_main(argv, stop=stop)), daemon=True)
    runner.start()
    try:
        fabric.submit("train", [("main", 2, 4)])
        deadline = time.monotonic() + 60
        while fabric.entry("train")["state"] == "Pending" and time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.1)
        entry = fabric.entry("train")
        assert entry["state"] == "Ready", entry
        assert entry["podSetUpdates"][0]["nodeSelector"][CLIQUE].startswith(TEAM_NS)
        lease = client.CoordinationV1Api(installed.admin).read_namespaced_lease("atoll-controller", RELEASE_NS)
        assert lease.spec.holder_identity == "rbac-replica"
        deadline = time.monotonic() + 10
        while not fabric.events_for("train") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fabric.events_for("train"), "the decision's Event was not posted"
    finally:
        stop.set()
        runner.join(30)
        structlog.reset_defaults()
    assert result == [0]


def _denied(call: Callable[[], Any]) -> int:
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


def _forbidden(installed: Installed) -> dict[str, Callable[[], Any]]:
    core, custom = client.CoreV1Api(installed.atoll), client.CustomObjectsApi(installed.atoll)
    leases = client.CoordinationV1Api(installed.atoll)
    pod = {"metadata": {"name": "victim", "namespace": TEAM_NS}, "spec": {"containers": [{"name": "c", "image": "registry.example.com/x:1"}]}}
    lease = {"metadata": {"name": "someone-else", "namespace": RELEASE_NS}, "spec": {}}
    return {
        "read a Pod": lambda: core.read_namespaced_pod("victim", TEAM_NS),
        "patch a Pod": lambda: core.patch_namespaced_pod("victim", TEAM_NS, {"metadata": {"labels": {"x": "y"}}}),
        "delete the webhook's claims Lease": lambda: leases.delete_namespaced_lease(CLAIMS, RELEASE_NS),
        "update a Lease that is not Atoll's": lambda: leases.replace_namespaced_lease("someone-else", RELEASE_NS, lease),
        "create a Lease outside its namespace": lambda: leases.create_namespaced_lease(TEAM_NS, {**lease, "metadata": {
            "name": CLAIMS, "namespace": TEAM_NS}}),
        "list Leases": lambda: leases.list_namespaced_lease(RELEASE_NS),
        "list Secrets in its own namespace": lambda: core.list_namespaced_secret(RELEASE_NS),
        "read a Secret": lambda: core.read_namespaced_secret("any", TEAM_NS),
        "list Secrets cluster-wide": lambda: core.list_secret_for_all_namespaces(),
        "delete a Pod": lambda: core.delete_namespaced_pod("victim", TEAM_NS),
        "create a Pod": lambda: core.create_namespaced_pod(TEAM_NS, pod),
        "evict a Pod": lambda: core.create_namespaced_pod_eviction("victim", TEAM_NS, {"metadata": {"name": "victim", "namespace": TEAM_NS}}),
        "patch a Workload's spec": lambda: custom.patch_namespaced_custom_object(GROUP, VERSION, TEAM_NS, "workloads", "train",
                                                                                 {"spec": {"active": False}}),
        "delete a Workload": lambda: custom.delete_namespaced_custom_object(GROUP, VERSION, TEAM_NS, "workloads", "train"),
        "create a Workload": lambda: custom.create_namespaced_custom_object(GROUP, VERSION, TEAM_NS, "workloads", {}),
        "patch a ClusterQueue": lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", installed.fabric.cq, {"spec": {}}),
        "label a Node": lambda: core.patch_node(installed.fabric.node_name(0, 0, 0), {"metadata": {"labels": {"x": "y"}}}),
        "edit the profiles ConfigMap": lambda: core.patch_namespaced_config_map("atoll-policies", RELEASE_NS, {"data": {"x": "y"}}),
        "list ConfigMaps outside its namespace": lambda: core.list_namespaced_config_map(TEAM_NS),
        "read another Lease": lambda: client.CoordinationV1Api(installed.atoll).read_namespaced_lease("kube-scheduler", RELEASE_NS),
        "patch another webhook configuration": lambda: client.AdmissionregistrationV1Api(installed.atoll).patch_mutating_webhook_configuration(
            "someone-else", {"metadata": {"labels": {"x": "y"}}}),
    }


FORBIDDEN = ["list Secrets in its own namespace", "read a Secret", "list Secrets cluster-wide", "delete a Pod", "create a Pod", "evict a Pod",
             "patch a Workload's spec", "delete a Workload", "create a Workload", "patch a ClusterQueue", "label a Node",
             "edit the profiles ConfigMap", "list ConfigMaps outside its namespace", "read another Lease",
             "patch another webhook configuration", "read a Pod", "patch a Pod", "delete the webhook's claims Lease",
             "update a Lease that is not Atoll's", "create a Lease outside its namespace", "list Leases"]


@pytest.mark.parametrize("action", FORBIDDEN)
def test_what_atoll_must_never_do_is_forbidden(installed: Installed, action: str) -> None:
    assert _denied(_forbidden(installed)[action]) == 403


def test_the_forbidden_actions_are_allowed_for_an_admin(installed: Installed) -> None:
    """The 403s come from the role, not from a broken request: the same Workload patch works as admin."""
    custom = client.CustomObjectsApi(installed.admin)
    out = custom.patch_namespaced_custom_object(GROUP, VERSION, TEAM_NS, "workloads", "train", {"metadata": {"labels": {"checked": "yes"}}})
    assert out["metadata"]["labels"]["checked"] == "yes"
    assert client.CoreV1Api(installed.admin).list_namespaced_secret(RELEASE_NS) is not None


def test_the_webhook_may_read_and_patch_its_own_configuration_only(installed: Installed) -> None:
    api = client.AdmissionregistrationV1Api(installed.atoll)
    [config] = by_kind(installed.objects, "MutatingWebhookConfiguration")
    name = config["metadata"]["name"]
    assert api.read_mutating_webhook_configuration(name).webhooks[0].name == "pods.atoll.dev"
    patched = api.patch_mutating_webhook_configuration(name, {"metadata": {"annotations": {"atoll.dev/ca-checked": "now"}}})
    assert patched.metadata.annotations["atoll.dev/ca-checked"] == "now"
    assert _denied(lambda: api.list_mutating_webhook_configuration()) == 403
    pods, nodes = client.CoreV1Api(installed.atoll).list_pod_for_all_namespaces(), client.CoreV1Api(installed.atoll).list_node()
    assert pods is not None and len(nodes.items) == 8


# ---------------------------------------------------------------------- the webhook, with the chart's token


@pytest.fixture(scope="module")
def webhook(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodPinner]:
    """The webhook as ``atoll run`` serves it, reading and writing with the chart's ServiceAccount
    token, and the chart's MutatingWebhookConfiguration as rendered, its Service swapped for this
    process's loopback URL (no kube-proxy here) with the CA it serves."""
    cert = ensure_serving_cert(tmp_path_factory.mktemp("webhook-certs"), ["127.0.0.1"], generate=True)
    assert cert.ca_pem is not None
    pinner = PodPinner(KubePort(installed.atoll, deadline=review_time_left), WebhookSettings(namespace=RELEASE_NS))
    assert pinner.start(60)
    server = WebhookServer(pinner, cert.cert_file, cert.key_file, bind="127.0.0.1", port=0).start()
    admission = client.AdmissionregistrationV1Api(installed.admin)
    [config] = by_kind(installed.objects, "MutatingWebhookConfiguration")
    body = copy.deepcopy(config)
    body["metadata"]["resourceVersion"] = admission.read_mutating_webhook_configuration(config["metadata"]["name"]).metadata.resource_version
    body["webhooks"][0]["clientConfig"] = {"url": f"https://127.0.0.1:{server.port}{MUTATE_PATH}",
                                           "caBundle": base64.b64encode(cert.ca_pem).decode()}
    admission.replace_mutating_webhook_configuration(config["metadata"]["name"], body)
    yield pinner
    server.stop()
    admission.delete_mutating_webhook_configuration(config["metadata"]["name"])  # no other test's pod may wait on it


def _dry_run(installed: Installed, pod: dict[str, Any]) -> dict[str, Any]:
    """Create with ``dryRun=All``: admitted in full (the webhook is called) and never stored."""
    out = client.CoreV1Api(installed.admin).create_namespaced_pod(TEAM_NS, pod, dry_run="All")
    answer: dict[str, Any] = installed.admin.sanitize_for_serialization(out)
    return answer


def _lease_version(installed: Installed) -> str | None:
    try:
        return str(client.CoordinationV1Api(installed.admin).read_namespaced_lease(CLAIMS, RELEASE_NS).metadata.resource_version)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_the_webhook_pins_marks_and_the_controller_requeues_with_only_the_charts_permissions(installed: Installed,
                                                                                             webhook: PodPinner) -> None:
    fabric = installed.fabric
    exact = profiles_doc(fabric.flavor, fabric.topology, flavors={fabric.flavor: {"topology": fabric.topology, "enforcement": "exact"}})
    client.CoreV1Api(installed.admin).patch_namespaced_config_map("atoll-policies", RELEASE_NS, {"data": {"profiles.yaml": yaml.safe_dump(exact)}})
    controller = Controller(KubePort(installed.atoll), recorder=Recorder(io.StringIO()),
                            settings=Settings(kueue=KueueSettings(admission_check=fabric.check), config=ConfigSettings(namespace=RELEASE_NS)))
    fabric.submit("pinned", [("main", 2, 4)])
    assert [v.outcome for v in run(controller)] == ["admit"]
    slots = [node for node, count in planned(fabric.entry("pinned")).items() for _ in range(count)]
    assert len(set(slots)) == 2

    # a dry run is answered in full and writes nothing: no claims Lease, no pod
    assert pinned_node(_dry_run(installed, kueue_pod(fabric, "pinned", "pinned-0"))) == slots[0]
    assert _lease_version(installed) is None
    assert not client.CoreV1Api(installed.admin).list_namespaced_pod(TEAM_NS, label_selector="atoll.dev/decision-id").items

    # pods without an index: each slot is claimed in the Lease the webhook creates and updates
    pods = [create(fabric, kueue_pod(fabric, "pinned", f"pinned-{i}")) for i in range(2)]
    assert sorted(pinned_node(p) or "" for p in pods) == sorted(slots)
    assert _lease_version(installed) is not None
    for i, pod in enumerate(pods):
        bind(fabric, f"pinned-{i}", pinned_node(pod) or "")

    # pod 0's node fails and is cordoned; the other node of the island is full: no replacement
    lost = pinned_node(pods[0]) or ""
    fail(fabric, "pinned-0")
    fabric.core.patch_node(lost, {"spec": {"unschedulable": True}})
    settle(webhook, fabric.port, TEAM_NS)  # the webhook reads a watch-fed cache
    version = _lease_version(installed)
    assert pinned_node(_dry_run(installed, kueue_pod(fabric, "pinned", "pinned-0-dry"))) == lost
    assert REQUEUE_CONDITION not in {c["type"] for c in fabric.workload("pinned")["status"]["conditions"]}  # the dry run marked nothing
    assert _lease_version(installed) == version
    again = create(fabric, kueue_pod(fabric, "pinned", "pinned-0-b"))
    assert pinned_node(again) == lost
    marks = {c["type"]: c for c in fabric.workload("pinned")["status"]["conditions"]}
    assert marks[REQUEUE_CONDITION]["status"] == "True" and "pinned-0-b" in marks[REQUEUE_CONDITION]["message"]

    # the controller, with the same token, asks Kueue for the requeue
    (verdict,) = run(controller)
    entry = fabric.entry("pinned")
    assert verdict.written and entry["state"] == "Retry" and f"pod {TEAM_NS}/pinned-0-b (podset main" in entry["message"]
    assert fabric.kueue.react(TEAM_NS, "pinned") == "retry"


def test_secure_metrics_answer_only_a_token_the_cluster_allows_to_read_them(installed: Installed) -> None:
    """The chart's default: ``/metrics`` over HTTPS, each scrape's token reviewed by the real
    apiserver (TokenReview, then SubjectAccessReview for get /metrics) with the chart's own RBAC;
    a ServiceAccount bound to the chart's metrics-reader role reads them, another does not."""
    import socket

    import httpx

    core = client.CoreV1Api(installed.admin)
    [reader] = [r for r in by_kind(installed.objects, "ClusterRole") if r["metadata"]["name"] == f"{SA}-metrics-reader"]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    tokens = {}
    for name in ("prometheus", "stranger"):
        core.create_namespaced_service_account(RELEASE_NS, {"metadata": {"name": name}})
        tokens[name] = core.create_namespaced_service_account_token(name, RELEASE_NS, {"spec": {"expirationSeconds": 3600}}).status.token
    client.RbacAuthorizationV1Api(installed.admin).create_cluster_role_binding({
        "metadata": {"name": "prometheus-reads-atoll"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": RELEASE_NS}]})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    [deployment] = by_kind(installed.objects, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert "--metrics-secure" in container["args"]
    argv = [a for a in container["args"][1:] if not a.startswith("--webhook")]
    argv += ["--kubeconfig", str(installed.kubeconfig), "--metrics-port", str(port), "--health-port", "off", "--identity", "metrics-replica"]
    stop = threading.Event()
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(run_main(argv, stop=stop)), daemon=True)
    runner.start()
    url = f"https://127.0.0.1:{port}/metrics"

    def get(token: str | None = None) -> httpx.Response:
        return httpx.get(url, headers={"Authorization": f"Bearer {token}"} if token else {}, verify=False, timeout=10)

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and runner.is_alive():
            try:
                get()
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert get().status_code == 401
        assert get("not-a-token").status_code == 401
        refused = get(tokens["stranger"])
        assert refused.status_code == 403 and f"system:serviceaccount:{RELEASE_NS}:stranger may not get /metrics" in refused.text
        allowed = get(tokens["prometheus"])
        assert allowed.status_code == 200 and "atoll_decisions_total" in allowed.text
        with pytest.raises(httpx.TransportError):
            httpx.get(url.replace("https://", "http://"), timeout=10)  # plain HTTP is not served
        assert get(tokens["prometheus"]).status_code == 200  # and the server still serves after it
    finally:
        stop.set()
        runner.join(30)
        structlog.reset_defaults()
    assert result == [0]


def test_parked_quota_is_given_back_with_only_the_charts_permissions(installed: Installed) -> None:
    """The controller, with the chart's token, watches LocalQueues (so it maps a Workload waiting
    for quota to its ClusterQueue without a read per Workload) and ClusterQueues (cohorts and
    quota, without a read per pass); it needs no ``get`` on either, and the chart grants none."""
    from admission.kube import CLUSTER_QUEUES, LOCAL_QUEUES
    from admission.kube.errors import Forbidden
    from tests.kube_objects import workload

    fabric = installed.fabric
    port = KubePort(installed.atoll, Settings().api)
    controller = Controller(port, recorder=Recorder(io.StringIO()),
                            settings=Settings(kueue=KueueSettings(admission_check=fabric.check), config=ConfigSettings(namespace=RELEASE_NS)))
    controller.sync()  # lists every watched resource with the chart's token
    assert controller.quota_yield.cluster_queue_of(workload(TEAM_NS, "waiter", [("main", 1, 4)])) == fabric.cq
    assert controller.quota_yield.cluster_queue_of(workload(TEAM_NS, "lost", [("main", 1, 4)], queue="no-such-queue")) is None
    assert fabric.cq in controller.cache.objects[CLUSTER_QUEUES]
    with pytest.raises(Forbidden):
        port.get(LOCAL_QUEUES, "lq", namespace=TEAM_NS)
    with pytest.raises(Forbidden):
        port.get(CLUSTER_QUEUES, fabric.cq)


def test_the_uninstall_hook_ends_yields_with_only_its_own_permissions(installed: Installed) -> None:
    """The post-delete hook's ServiceAccount, ClusterRole and binding, applied as rendered, let
    ``atoll yields --end`` reactivate a Workload Atoll deactivated; nothing else is granted."""
    from admission.cli._yields import main as yields_main
    from admission.vocabulary import QUOTA_YIELD, QUOTA_YIELD_UNTIL
    from tests.kube_objects import workload

    hooks = [o for o in render(for_server(installed.admin, {"parkWaiting": True}), release=RELEASE, namespace=RELEASE_NS)
             if "helm.sh/hook" in (o["metadata"].get("annotations") or {}) and o["kind"] != "Job"]
    for obj in hooks:
        apply(installed.admin, obj)
    [sa] = by_kind(hooks, "ServiceAccount")
    core = client.CoreV1Api(installed.admin)
    token = core.create_namespaced_service_account_token(sa["metadata"]["name"], RELEASE_NS,
                                                          {"spec": {"expirationSeconds": 3600}}).status.token
    hook = _client(installed.server, token)
    manifest = workload(TEAM_NS, "gave-back", [("main", 1, 4)], annotations={QUOTA_YIELD: f"{TEAM_NS}/waiter", QUOTA_YIELD_UNTIL: "0"})
    manifest["spec"]["active"] = False
    installed.fabric.kueue.create(manifest)
    assert yields_main(["--end", "--format", "json"], stdout=io.StringIO(), api_client=hook) == 0
    assert installed.fabric.workload("gave-back")["spec"]["active"] is True
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(hook).list_namespaced_pod(TEAM_NS)
    assert denied.value.status == 403
