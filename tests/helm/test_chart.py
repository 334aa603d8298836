"""The Helm chart lints, renders what each set of values promises, refuses values that cannot
work together with the field named, and every object it renders is accepted by a real
kube-apiserver (server-side dry run) with Kueue's CRDs loaded."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml
from kubernetes import client

from admission.cli._run import build_settings
from admission.cli._run import parser as run_parser
from admission.webhook import WebhookSettings
from policies import load_profiles
from tests.helm.chart import CERT_MANAGER_GROUP, CHART, apply, by_kind, for_server, helm, render

EXACT_DOC = """
defaultProfile: strict
flavors:
  gb200: {topology: nvl72-fabric, enforcement: exact}
profiles:
  strict: {requiredLevel: nvidia.com/gpu.clique}
"""

CUSTOM_PROFILES = {  # a mapping, not a string; its own ConfigMap name
    "configMapName": "team-policies",
    "document": {
        "defaultProfile": "wide",
        "flavors": {"h100": {"topology": "dgx-h100-fabric"}},
        "profiles": {"wide": {"preferredLevel": "nvidia.com/gpu.clique", "maxSpanLevel": "network.example.com/spine",
                              "flavors": {"a100": {"maxSpanLevel": "network.example.com/leaf"}}}},
        "queues": {"team-a/research": "wide"},
    },
}

MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "webhook-off": {"webhook": {"enabled": False}},
    "webhook-on": {"webhook": {"enabled": True}},
    "exact": {"profiles": {"document": EXACT_DOC}},
    "custom-profiles": {"profiles": CUSTOM_PROFILES, "webhook": {"enabled": False}},
    "cert-manager": {"profiles": {"document": EXACT_DOC}, "webhook": {"certs": {"mode": "cert-manager"}}},
    "cert-manager-issuer": {"profiles": {"document": EXACT_DOC},
                            "webhook": {"certs": {"mode": "cert-manager", "issuer": {"kind": "ClusterIssuer", "name": "corp-ca"}},
                                        "failurePolicy": "Ignore", "namespaceSelector": {"matchLabels": {"gpu": "yes"}}}},
    "single-replica": {"replicas": 1, "leaderElection": {"enabled": False}, "podDisruptionBudget": {"enabled": False},
                       "metrics": {"service": {"enabled": False}}, "admissionCheck": {"create": False}},
    "parking": {"parkWaiting": True},
    "no-parking": {"parkWaiting": False},
}


def _controller_role(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The controller's ClusterRole (not the uninstall hook's, not the metrics reader's)."""
    [role] = [o for o in by_kind(objects, "ClusterRole") if "helm.sh/hook" not in (o["metadata"].get("annotations") or {})
              and not o["metadata"]["name"].endswith("-metrics-reader")]
    return role


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = by_kind(objects, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _flags(objects: list[dict[str, Any]]) -> list[str]:
    return [a.split("=")[0] for a in _container(objects)["args"]]


# ---------------------------------------------------------------------- lint and render


def test_the_chart_lints_clean_in_strict_mode() -> None:
    report = helm.lint(str(CHART), strict=True)
    assert report["errors"] == [] and not [m for m in report["messages"] if m["severity"] >= 2], report


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_case_lints_and_renders(case: str) -> None:
    assert helm.lint(str(CHART), MATRIX[case], strict=True)["errors"] == []
    kinds = sorted(o["kind"] for o in render(MATRIX[case]))
    assert {"ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Role", "RoleBinding", "ServiceAccount"} <= set(kinds)


def test_the_defaults_render_the_whole_install() -> None:
    """The default profiles use domain enforcement only: no webhook is installed (webhook.enabled auto)."""
    objects = render(release="prod", namespace="gpu-system")
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("AdmissionCheck", "atoll-topology"), ("ClusterRole", "prod-atoll"), ("ClusterRole", "prod-atoll-end-yields"),
        ("ClusterRole", "prod-atoll-metrics-reader"), ("ClusterRoleBinding", "prod-atoll"), ("ClusterRoleBinding", "prod-atoll-end-yields"),
        ("ConfigMap", "atoll-policies"), ("Deployment", "prod-atoll"), ("Job", "prod-atoll-end-yields"),  # a profile may park: the uninstall hook
        ("PodDisruptionBudget", "prod-atoll"), ("Role", "prod-atoll"), ("RoleBinding", "prod-atoll"),
        ("Service", "prod-atoll-metrics"), ("ServiceAccount", "prod-atoll"), ("ServiceAccount", "prod-atoll-end-yields")]
    [deployment] = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert _container(objects)["args"] == [
        "run", "--namespace=gpu-system", "--configmap=atoll-policies", "--admission-check=atoll-topology", "--gpu-resource=nvidia.com/gpu",
        "--metrics-port=8080", "--metrics-secure", "--health-port=8081", "--log-level=info", "--leader-elect",
        "--lease-name=atoll-controller"]
    exact = render(MATRIX["exact"], release="prod", namespace="gpu-system")
    assert _container(exact)["args"][11:] == [
        "--webhook-port=9443", "--webhook-cert-dir=/var/run/atoll/certs", "--webhook-timeout-seconds=5", "--webhook-generate-certs",
        "--webhook-service=prod-webhook", "--webhook-namespace=gpu-system", "--webhook-config=prod-atoll"]


@pytest.mark.parametrize(("case", "installed"), [("defaults", False), ("exact", True), ("webhook-on", True), ("webhook-off", False)])
def test_the_webhook_is_installed_only_when_a_flavor_uses_exact_or_it_is_forced_on(case: str, installed: bool) -> None:
    objects = render(MATRIX[case])
    assert bool(by_kind(objects, "MutatingWebhookConfiguration")) is installed
    assert any(f.startswith("--webhook-port") for f in _flags(objects)) is installed


def test_the_webhook_counts_the_other_flavors_accelerators_the_values_name() -> None:
    assert not [a for a in _container(render(MATRIX["exact"]))["args"] if a.startswith("--accelerator-resources")]
    args = _container(render({**MATRIX["exact"], "acceleratorResources": ["amd.com/gpu", "habana.ai/gaudi"]}))["args"]
    assert "--accelerator-resources=amd.com/gpu,habana.ai/gaudi" in args


def test_the_pods_are_hardened_and_numba_caches_on_a_writable_volume() -> None:
    objects = render(MATRIX["exact"])
    [deployment] = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    for c in pod["containers"] + pod["initContainers"]:
        sc = c["securityContext"]
        assert (sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"], sc["capabilities"]) == (True, False, {"drop": ["ALL"]})
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    container = _container(objects)
    cache = {e["name"]: e.get("value") for e in container["env"]}["NUMBA_CACHE_DIR"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = [name for name, path in mounts.items() if cache.startswith(path + "/") and "emptyDir" in volumes[name]]
    assert writable == ["scratch"]
    [init] = pod["initContainers"]
    assert "/scratch/numba-cache" in " ".join(init["command"]) and {m["mountPath"] for m in init["volumeMounts"]} == {"/scratch"}
    assert {p["name"] for p in container["ports"]} == {"metrics", "health", "webhook"}


def test_the_webhook_follows_the_agreed_contract() -> None:
    objects = render(MATRIX["exact"], release="prod", namespace="gpu-system")
    [service] = [s for s in by_kind(objects, "Service") if s["metadata"]["name"] == "prod-webhook"]
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    assert {p["name"]: p["containerPort"] for p in _container(objects)["ports"]}["webhook"] == 9443
    [config] = by_kind(objects, "MutatingWebhookConfiguration")
    [hook] = config["webhooks"]
    # only pods of exact flavors: a domain-placed pod (decision-id label alone) never waits on the webhook
    assert hook["objectSelector"] == {"matchExpressions": [{"key": "atoll.dev/decision-id", "operator": "Exists"},
                                                           {"key": "atoll.dev/enforcement", "operator": "In", "values": ["exact"]}]}
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Namespaced"}]
    # the webhook writes outside dry runs (claims Lease, requeue condition) and nothing under one
    assert (hook["failurePolicy"], hook["sideEffects"], hook["admissionReviewVersions"], hook["timeoutSeconds"]) == ("Fail", "NoneOnDryRun", ["v1"], 5)
    assert hook["clientConfig"] == {"service": {"name": "prod-webhook", "namespace": "gpu-system", "path": "/mutate-pods", "port": 443}}
    [rule] = [r for r in _controller_role(objects)["rules"] if "mutatingwebhookconfigurations" in r["resources"]]
    assert (rule["resourceNames"], rule["verbs"]) == (["prod-atoll"], ["get", "patch"])


def _lease_rules(objects: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    [role] = by_kind(objects, "Role")
    return [(tuple(r.get("resourceNames") or ()), tuple(r["verbs"])) for r in role["rules"] if r["resources"] == ["leases"]]


@pytest.mark.parametrize(("values", "names"), [
    ({"profiles": {"document": EXACT_DOC}}, ("atoll-controller", WebhookSettings().claims_lease)),
    ({}, ("atoll-controller",)),
    ({"webhook": {"enabled": False}}, ("atoll-controller",)),
    ({"replicas": 1, "leaderElection": {"enabled": False}, "webhook": {"enabled": True}}, (WebhookSettings().claims_lease,)),
    ({"replicas": 1, "leaderElection": {"enabled": False}, "webhook": {"enabled": False}}, ()),
])
def test_the_role_grants_exactly_the_leases_in_use(values: dict[str, Any], names: tuple[str, ...]) -> None:
    """The leader Lease with leader election, the webhook's claims Lease with the webhook: get and
    update on those names only, create (which no name can restrict) only when one is in use."""
    objects = render(values)
    assert _lease_rules(objects) == ([((), ("create",)), (names, ("get", "update"))] if names else [])
    assert not [r for r in _controller_role(objects)["rules"] if "leases" in r["resources"]]


def test_without_the_webhook_nothing_of_it_is_rendered() -> None:
    objects = render(MATRIX["webhook-off"])
    assert not by_kind(objects, "MutatingWebhookConfiguration")
    assert [s["metadata"]["name"] for s in by_kind(objects, "Service")] == ["atoll-metrics"]
    assert not [f for f in _flags(objects) if f.startswith("--webhook")]
    assert not [r for r in _controller_role(objects)["rules"] if r["apiGroups"] == ["admissionregistration.k8s.io"]]


def test_cert_manager_mode_mounts_its_secret_and_asks_for_ca_injection() -> None:
    objects = render(MATRIX["cert-manager"], release="prod", namespace="gpu-system")
    [config] = by_kind(objects, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "gpu-system/prod-atoll-webhook"}
    [cert] = by_kind(objects, "Certificate")
    assert cert["spec"]["dnsNames"] == ["prod-webhook.gpu-system.svc", "prod-webhook.gpu-system.svc.cluster.local"]
    assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": "prod-atoll-selfsigned"} and by_kind(objects, "Issuer")
    [deployment] = by_kind(objects, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-certs"]["secret"]["secretName"] == cert["spec"]["secretName"]
    assert "--webhook-generate-certs" not in _flags(objects)
    assert not [r for r in _controller_role(objects)["rules"] if r["apiGroups"] == ["admissionregistration.k8s.io"]]
    issuer = render(MATRIX["cert-manager-issuer"])
    assert not by_kind(issuer, "Issuer") and by_kind(issuer, "Certificate")[0]["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


@pytest.mark.parametrize("case", ["defaults", "exact", "custom-profiles"])
def test_the_configmap_holds_a_valid_profiles_document(case: str) -> None:
    objects = render(MATRIX[case])
    [configmap] = by_kind(objects, "ConfigMap")
    doc = load_profiles(configmap["data"]["profiles.yaml"])
    assert f"--configmap={configmap['metadata']['name']}" in _container(objects)["args"]
    if case == "custom-profiles":
        assert configmap["metadata"]["name"] == "team-policies" and {q: r.profile for q, r in doc.queues.items()} == {"team-a/research": "wide"}
    if case == "exact":
        assert doc.flavors["gb200"].enforcement == "exact" and by_kind(objects, "MutatingWebhookConfiguration")


def test_a_changed_profiles_document_does_not_roll_the_pods_but_other_values_do() -> None:
    def checksum(values: dict[str, Any]) -> str:
        [deployment] = by_kind(render(values), "Deployment")
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/values"])

    assert checksum({}) == checksum({"profiles": {"document": EXACT_DOC}})
    assert checksum({}) != checksum({"logLevel": "debug"})


@pytest.mark.parametrize(("values", "message"), [
    ({"webhook": {"enabled": False}, "profiles": {"document": EXACT_DOC}},
     "profiles.document: flavors.gb200.enforcement is exact, which needs the webhook: set webhook.enabled=auto or true"),
    ({"webhook": {"enabled": "yes"}}, 'webhook.enabled: "yes" is not auto, true or false'),
    ({"webhook": {"certs": {"mode": "vault"}}}, 'webhook.certs.mode: "vault" is not generate or cert-manager'),
    ({"webhook": {"failurePolicy": "Retry"}}, 'webhook.failurePolicy: "Retry" is not Fail or Ignore'),
    ({"webhook": {"timeoutSeconds": 31}}, "webhook.timeoutSeconds: 31 must be between 1 and 30"),
    ({"leaderElection": {"enabled": False}}, "leaderElection.enabled: must be true when replicas > 1"),
    ({"profiles": {"document": "defaultProfile: [unclosed"}}, "profiles.document: not YAML"),
])
def test_values_that_cannot_work_are_refused_naming_the_field(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=message.replace("[", r"\[").replace(".", r"\.")):
        render(values)


def _undocumented(text: str) -> list[str]:
    """Keys of a values file that neither they nor a parent group have a ``# --`` comment right above."""
    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented)
    missing, block_indent, commented = [], -1, False
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if block_indent >= 0 and (indent > block_indent or not stripped):
            continue  # inside a block scalar (the profiles document)
        block_indent = -1
        if not stripped or stripped.startswith("#"):
            commented = bool(stripped) and (commented or stripped.startswith("# --"))
            continue
        key = stripped.split(":")[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        documented = commented or any(d for _, _, d in stack)
        value = stripped.split(":", 1)[1].split(" #")[0].strip()
        if value in ("|", ">"):
            block_indent = indent
        if value == "":
            stack.append((indent, key, documented))
        elif not documented:
            missing.append(".".join([k for _, k, _ in stack] + [key]))
        commented = False
    return missing


def test_every_value_is_documented() -> None:
    assert _undocumented((CHART / "values.yaml").read_text()) == []
    assert _undocumented("a:\n  b: 1\n# -- c\nc: 2\n") == ["a.b"]


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_the_container_args_are_flags_atoll_run_accepts(case: str) -> None:
    objects = render(MATRIX[case])
    args = run_parser({}).parse_args(_container(objects)["args"][1:])
    assert (args.namespace, args.admission_check, args.configmap) == ("atoll-system", "atoll-topology", by_kind(objects, "ConfigMap")[0]["metadata"]["name"])
    assert args.leader_elect is (by_kind(objects, "Deployment")[0]["spec"]["replicas"] > 1)
    webhook = bool(by_kind(objects, "MutatingWebhookConfiguration"))
    assert args.webhook_port == (9443 if webhook else 0)


def _run_settings(objects: list[dict[str, Any]]) -> Any:
    """The settings ``atoll run`` starts with in the rendered container: its args and its env."""
    container = _container(objects)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return build_settings(run_parser(env).parse_args(container["args"][1:]))


def test_the_span_cost_parking_and_write_values_reach_atoll_run() -> None:
    settings = _run_settings(render({}))
    assert (settings.cost.link_model, settings.cost.comm_fraction, settings.cost.overlap) == ("calibrated", 0.1, 0.0)
    assert (settings.decisions.park_waiting, settings.decisions.write_workers) == (None, 0)  # each profile's queueing.parkWaiting
    settings = _run_settings(render({"parkWaiting": True, "writeWorkers": 4,
                                     "spanCost": {"linkModel": "flat-ring", "commFraction": 0.25, "overlap": 0.5}}))
    assert (settings.cost.link_model, settings.cost.comm_fraction, settings.cost.overlap) == ("flat-ring", 0.25, 0.5)
    assert (settings.decisions.park_waiting, settings.decisions.write_workers) == (True, 4)
    assert _run_settings(render({"parkWaiting": False})).decisions.park_waiting is False
    assert settings.decisions.quota_yield_max_seconds == 43200.0
    assert _run_settings(render({"quotaYieldMaxSeconds": 900})).decisions.quota_yield_max_seconds == 900.0
    assert _run_settings(render({"parkWaiting": "profile"})).decisions.park_waiting is None


def test_a_park_waiting_value_other_than_true_false_or_profile_is_refused() -> None:
    with pytest.raises(Exception, match="parkWaiting"):
        render({"parkWaiting": "yes"})


def test_deciding_before_quota_is_off_unless_the_value_turns_it_on_and_its_hold_and_depth_reach_atoll_run() -> None:
    d = _run_settings(render({})).decisions
    assert (d.decide_before_quota, d.before_quota_hold_seconds, d.before_quota_depth, d.before_quota_settle_seconds) == (False, 30.0, 2, 1.0)
    d = _run_settings(render({"decideBeforeQuota": {"enabled": True, "holdSeconds": 12.5, "depth": 4, "settleSeconds": 0}})).decisions
    assert (d.decide_before_quota, d.before_quota_hold_seconds, d.before_quota_depth, d.before_quota_settle_seconds) == (True, 12.5, 4, 0.0)


def test_the_quota_yield_options_are_off_unless_their_values_turn_them_on_and_then_reach_atoll_run() -> None:
    objects = render({})
    d = _run_settings(objects).decisions
    assert (d.quota_yield_back_when_fits, d.quota_yield_in_turn, d.quota_yield_turn_lead_seconds) == (False, False, None)
    assert "ATOLL_QUOTA_YIELD_TURN_LEAD_SECONDS" not in {e["name"] for e in _container(objects)["env"]}
    d = _run_settings(render({"quotaYieldBackWhenFits": True, "quotaYieldInTurn": True, "quotaYieldTurnLeadSeconds": 3600})).decisions
    assert (d.quota_yield_back_when_fits, d.quota_yield_in_turn, d.quota_yield_turn_lead_seconds) == (True, True, 3600.0)
    assert _run_settings(render({"quotaYieldTurnLeadSeconds": 0})).decisions.quota_yield_turn_lead_seconds == 0.0
    assert _run_settings(render({"quotaYieldTurnLeadSeconds": 1e8})).decisions.quota_yield_turn_lead_seconds == 1e8


def test_only_parking_lets_atoll_patch_a_workload() -> None:
    """A parked Workload gives its quota back by ``spec.active`` (``_yielding``): the ClusterRole
    may patch Workloads unless ``parkWaiting`` is false (by default a profile may park), and never with it false."""
    def verbs(values: dict[str, Any]) -> list[str]:
        (rule,) = [r for o in render(values) if o["kind"] == "ClusterRole" and "helm.sh/hook" not in (o["metadata"].get("annotations") or {})
                   for r in o["rules"] if r.get("resources") == ["workloads"]]
        return list(rule["verbs"])
    assert verbs({"parkWaiting": False}) == ["get", "list", "watch"]
    assert verbs({}) == verbs({"parkWaiting": True}) == ["get", "list", "watch", "patch"]


def test_parking_brings_a_post_delete_hook_that_ends_the_yields_with_its_own_rbac() -> None:
    """Only a running Atoll reactivates a Workload that gave its quota back, so unless ``parkWaiting`` is false
    an uninstall runs ``atoll yields --end`` after the release is gone, with RBAC of its own."""
    from admission.cli import COMMANDS

    assert not [o for o in render({"parkWaiting": False}) if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    hooks = [o for o in render({}) if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]  # by default a profile may park
    assert sorted(o["kind"] for o in hooks) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    assert {o["metadata"]["annotations"]["helm.sh/hook"] for o in hooks} == {"post-delete"}
    [job] = by_kind(hooks, "Job")
    [role] = by_kind(hooks, "ClusterRole")
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["yields", "--end"] and "yields" in COMMANDS
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == by_kind(hooks, "ServiceAccount")[0]["metadata"]["name"]
    assert role["rules"] == [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list", "patch"]}]
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hooks}
    assert weights["Job"] > max(w for k, w in weights.items() if k != "Job")  # its RBAC exists before it runs


# ---------------------------------------------------------------------- the real apiserver


@pytest.mark.apiserver
@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_rendered_object_passes_a_server_side_dry_run(case: str, kube_client: Any, namespace: str) -> None:
    objects = render(for_server(kube_client, MATRIX[case]), release=f"r{abs(hash(case)) % 10_000}", namespace=namespace)
    checked, skipped = [], []
    for obj in objects:
        if obj["apiVersion"].split("/")[0] == CERT_MANAGER_GROUP:
            # cert-manager's CRDs are not installed here (they are cert-manager's, not Kueue's): its
            # objects are checked by shape in test_cert_manager_mode_mounts_its_secret_and_asks_for_ca_injection
            skipped.append(obj["kind"])
            continue
        out = apply(kube_client, obj, dry_run=True)
        assert out["metadata"]["name"] == obj["metadata"]["name"] and out["kind"] == obj["kind"]
        checked.append(obj["kind"])
    assert len(checked) + len(skipped) == len(objects) and set(skipped) <= {"Certificate", "Issuer"}
    assert ("Deployment" in checked) and ("ClusterRole" in checked)


@pytest.mark.apiserver
def test_a_dry_run_does_catch_a_broken_object(kube_client: Any, namespace: str) -> None:
    from kubernetes.dynamic.exceptions import DynamicApiError

    [check] = by_kind(render(namespace=namespace), "AdmissionCheck")
    del check["spec"]["controllerName"]
    with pytest.raises(DynamicApiError) as err:
        apply(kube_client, check, dry_run=True)
    assert err.value.status == 422 and "controllerName" in str(err.value.body)


@pytest.mark.apiserver
def test_under_gitops_a_resync_keeps_the_ca_bundle_the_process_wrote(kube_client: Any, namespace: str) -> None:
    """``helm template`` and Argo CD render without a cluster, so ``lookup`` finds nothing: the
    generate mode's configuration is rendered without a caBundle field at all. Applied server-side
    (as Argo CD's ServerSideApply and Flux do), the field stays owned by the process that wrote it,
    so a re-sync of the same manifest leaves it in place."""
    from admission.kube import KubePort
    from admission.webhook import MUTATING_WEBHOOK_CONFIGURATIONS, CaBundlePublisher, ensure_serving_cert

    values = {"profiles": {"document": EXACT_DOC}, "webhook": {"namespaceSelector": {"matchLabels": {"atoll.dev/no-such": "namespace"}}}}
    [config] = by_kind(render(values, release=f"g{abs(hash(namespace)) % 10_000}", namespace=namespace), "MutatingWebhookConfiguration")
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]  # nothing for an applier to own
    port = KubePort(kube_client)
    name = config["metadata"]["name"]
    port.apply(MUTATING_WEBHOOK_CONFIGURATIONS, config, field_manager="argocd-controller")
    try:
        import tempfile

        with tempfile.TemporaryDirectory() as certs:
            ca = ensure_serving_cert(certs, ["x"], generate=True).ca_pem
        assert ca is not None and CaBundlePublisher(port, name, ca).publish_once()
        port.apply(MUTATING_WEBHOOK_CONFIGURATIONS, config, field_manager="argocd-controller")  # the next sync
        live = port.get(MUTATING_WEBHOOK_CONFIGURATIONS, name)
        assert base64.b64decode(live["webhooks"][0]["clientConfig"]["caBundle"]) == ca
    finally:
        client.AdmissionregistrationV1Api(kube_client).delete_mutating_webhook_configuration(name)
@pytest.mark.parametrize(("values", "where", "what"), [
    ({"replicsa": 3}, "at ''", "additional properties 'replicsa' not allowed"),
    ({"image": {"repo": "corp/atoll"}}, "at '/image'", "additional properties 'repo' not allowed"),
    ({"webhook": {"certs": {"mod": "generate"}}}, "at '/webhook/certs'", "additional properties 'mod' not allowed"),
    ({"logLevel": "verbose"}, "at '/logLevel'", "value must be one of 'debug', 'info', 'warning', 'error'"),
    ({"metrics": {"port": "8080"}}, "at '/metrics/port'", "got string, want integer"),
    ({"spanCost": {"linkModel": "mesh"}}, "at '/spanCost/linkModel'", "value must be one of 'calibrated', 'flat-ring'"),
    ({"spanCost": {"commFraction": 1.5}}, "at '/spanCost/commFraction'", "maximum: got 1.5, want 1"),
    ({"writeWorkers": 64}, "at '/writeWorkers'", "maximum: got 64, want 32"),
    ({"decideBeforeQuota": {"depth": 0}}, "at '/decideBeforeQuota/depth'", "minimum: got 0, want 1"),
    ({"quotaYieldTurnLeadSeconds": -60}, "at '/quotaYieldTurnLeadSeconds'", "minimum: got -60, want 0"),
    ({"quotaYieldInTurn": "yes"}, "at '/quotaYieldInTurn'", "got string, want boolean"),
])
def test_values_the_schema_does_not_know_fail_rendering(values: dict[str, Any], where: str, what: str) -> None:
    with pytest.raises(helm.HelmValuesError) as err:
        render(values)
    assert f"- {where}: {what}" in str(err.value)


def _keys(values: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for key, value in values.items():
        out.add(prefix + key)
        if isinstance(value, dict) and value and key not in FREE_FORM:
            out |= _keys(value, f"{prefix}{key}.")
    return out


FREE_FORM = {"resources", "podSecurityContext", "securityContext", "nodeSelector", "affinity", "podAnnotations", "podLabels",
             "annotations", "namespaceSelector", "issuer"}


def test_the_schema_names_every_value_and_only_those() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())

    def described(node: dict[str, Any], prefix: str = "") -> set[str]:
        out = set()
        for key, sub in node.get("properties", {}).items():
            out.add(prefix + key)
            if sub.get("properties"):
                out |= described(sub, f"{prefix}{key}.")
        return out

    assert _keys(yaml.safe_load((CHART / "values.yaml").read_text())) == described(schema)
