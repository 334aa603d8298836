"""The handler over real HTTPS on loopback: AdmissionReview v1 in and out, TLS verified against
the generated CA, bad requests answered with the field that is wrong, and slots handed to pods
not stored yet never handed out twice."""

from __future__ import annotations

import base64
import datetime as dt
import json
import socket
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509

from admission.kube import LEASES, ClusterPort, errors
from admission.webhook import MUTATE_PATH, PodPinner, ServingCert, WebhookServer, WebhookSettings, ensure_serving_cert, merge_ca_bundle
from tests.admission.fabric import Fabric
from tests.admission.webhook.conftest import Served, admit, exact_fabric, kueue_pod, pinner
from tests.admission.webhook.test_pin import apply_adds, exact_pod


class RefusingPort:
    """A cluster port that fails the test on any call: proves an answer needed no API read."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the webhook called the cluster ({name}) for a pod it should leave alone")


@pytest.fixture
def offline(cert: ServingCert) -> Iterator[str]:
    port: ClusterPort = RefusingPort()  # type: ignore[assignment]
    server = WebhookServer(PodPinner(port), cert.cert_file, cert.key_file, bind="127.0.0.1", port=0).start()
    yield f"https://127.0.0.1:{server.port}"
    server.stop()


def review(pod: dict[str, Any], *, operation: str = "CREATE", namespace: str = "team", dry_run: bool = False) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": operation, "namespace": namespace,
        "object": pod, "dryRun": dry_run}}


def post(base: str, ca: bytes | None, body: Any) -> httpx.Response:
    ctx = ssl.create_default_context(cadata=(ca or b"").decode())
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(base + MUTATE_PATH, content=content, headers={"Content-Type": "application/json"}, verify=ctx, timeout=10)


def test_a_pod_without_exact_enforcement_is_allowed_unchanged_without_reading_the_cluster(offline: str, cert: ServingCert) -> None:
    plain = exact_pod()
    del plain["metadata"]["annotations"]["atoll.dev/enforcement"]
    req = review(plain)
    answer = post(offline, cert.ca_pem, req).json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"] == {"uid": req["request"]["uid"], "allowed": True}
    updated = review(exact_pod(), operation="UPDATE")  # only CREATE is pinned; an update never changes placement
    assert post(offline, cert.ca_pem, updated).json()["response"] == {"uid": updated["request"]["uid"], "allowed": True}


def test_unreadable_planned_nodes_allow_the_pod_with_a_warning_naming_the_annotation(offline: str, cert: ServingCert) -> None:
    pod = exact_pod("n0=two")
    response = post(offline, cert.ca_pem, review(pod)).json()["response"]
    assert response["allowed"] is True and "patch" not in response
    assert "atoll.dev/planned-nodes" in response["warnings"][0]


@pytest.mark.parametrize(("body", "fragment"), [
    (b"{not json", "body: not JSON"),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}, "apiVersion/kind"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "AdmissionReview.request: expected dict"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}, "request.uid: expected str"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "operation": "CREATE", "resource": {"resource": "pods"}, "object": "pod"}}, "request.object"),
])
def test_a_request_that_is_not_an_admission_review_gets_400_naming_the_field(offline: str, cert: ServingCert, body: Any,
                                                                            fragment: str) -> None:
    r = post(offline, cert.ca_pem, body)
    assert r.status_code == 400 and fragment in r.text


def test_other_paths_and_oversized_bodies_are_refused(offline: str, cert: ServingCert) -> None:
    ctx = ssl.create_default_context(cadata=(cert.ca_pem or b"").decode())
    assert httpx.post(offline + "/validate", content=b"{}", verify=ctx).status_code == 404
    assert httpx.get(offline + "/healthz", verify=ctx).text == "ok"
    host, port = offline.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(f"POST {MUTATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {64 * 1024 * 1024}\r\n\r\n".encode())
        assert tls.recv(4096).startswith(b"HTTP/1.1 413")  # refused before reading a byte of the body
    assert httpx.get(offline + "/healthz", verify=ctx).text == "ok"  # and the server keeps serving


def test_tls_is_verified_against_the_generated_ca_only(offline: str, cert: ServingCert, tmp_path: Path) -> None:
    other = ensure_serving_cert(tmp_path / "other", ["127.0.0.1"], generate=True)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        post(offline, other.ca_pem, review(exact_pod()))
    san = x509.load_pem_x509_certificate(cert.cert_file.read_bytes()).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert "127.0.0.1" in {str(n.value) for n in san.value}


@pytest.mark.apiserver
def test_two_replicas_answering_one_gang_at_once_give_distinct_slots_before_any_pod_is_stored(fabric: Fabric, served: Served) -> None:
    """The apiserver stores a pod only after the webhook answered: slots handed out meanwhile are
    claimed through the apiserver, so a second replica (its own process state) never repeats one."""
    exact_fabric(fabric)
    admit(fabric, "gang", [("main", 4, 2)])
    replica = pinner(fabric)
    assert replica.start(60)
    second = WebhookServer(replica, served.cert.cert_file, served.cert.key_file, bind="127.0.0.1", port=0).start()
    pods = [kueue_pod(fabric, "gang", "") for _ in range(5)]
    for p in pods:
        del p["metadata"]["name"]
        p["metadata"]["generateName"] = "gang-"
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one(pod: dict[str, Any], port: int) -> None:
        answer = post(f"https://127.0.0.1:{port}", served.cert.ca_pem, review(pod, namespace=fabric.ns)).json()["response"]
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=one, args=(p, (served.port, second.port)[i % 2])) for i, p in enumerate(pods)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        second.stop()
    patched = [apply_adds(pods[0], json.loads(base64.b64decode(a["patch"]))) for a in answers if "patch" in a]
    assert sorted(p["metadata"]["annotations"]["atoll.dev/slot"] for p in patched) == ["0", "1", "2", "3"]
    unpinned = [a for a in answers if "patch" not in a]
    assert len(unpinned) == 1 and "all 4 planned slots" in unpinned[0]["warnings"][0]


@pytest.mark.apiserver
def test_a_dry_run_claims_no_slot(fabric: Fabric, served: Served) -> None:
    exact_fabric(fabric)
    admit(fabric, "gang", [("main", 2, 4)])
    pod = kueue_pod(fabric, "gang", "gang-0")
    base = f"https://127.0.0.1:{served.port}"
    for _ in range(2):
        answer = post(base, served.cert.ca_pem, review(pod, namespace=fabric.ns, dry_run=True)).json()["response"]
        assert apply_adds(pod, json.loads(base64.b64decode(answer["patch"])))["metadata"]["annotations"]["atoll.dev/slot"] == "0"
    with pytest.raises(errors.NotFound):  # nothing written: not even the claims Lease exists
        fabric.port.get(LEASES, WebhookSettings().claims_lease, fabric.ns)
    post(base, served.cert.ca_pem, review(pod, namespace=fabric.ns))  # a real request claims its slot there
    assert fabric.port.get(LEASES, WebhookSettings().claims_lease, fabric.ns)["metadata"]["annotations"]["atoll.dev/slot-claims"] != "{}"


def test_a_generated_certificate_is_reused_and_made_anew_near_expiry_or_for_other_names(tmp_path: Path) -> None:
    first = ensure_serving_cert(tmp_path, ["atoll-webhook.atoll-system.svc"], generate=True)
    assert first.generated and (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    again = ensure_serving_cert(tmp_path, ["atoll-webhook.atoll-system.svc"], generate=True)
    assert not again.generated and again.ca_pem == first.ca_pem
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=340)
    assert ensure_serving_cert(tmp_path, ["atoll-webhook.atoll-system.svc"], generate=True, now=later).generated
    assert ensure_serving_cert(tmp_path, ["atoll-webhook.other.svc"], generate=True).generated
    mounted = ensure_serving_cert(tmp_path, ["anything"], generate=False)  # a mounted certificate is never replaced
    assert not mounted.generated


def test_a_missing_certificate_without_generation_says_what_to_do(tmp_path: Path) -> None:
    from admission.webhook import CertError

    with pytest.raises(CertError, match="--webhook-generate-certs"):
        ensure_serving_cert(tmp_path / "empty", ["x"], generate=False)


def test_the_ca_bundle_keeps_every_replica_trusted_and_drops_expired_cas(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    a, b, c = (ensure_serving_cert(tmp_path / n, ["x"], generate=True).ca_pem for n in "abc")
    old = ensure_serving_cert(tmp_path / "old", ["x"], generate=True, now=now - dt.timedelta(days=3700)).ca_pem
    assert a and b and c and old
    bundle = merge_ca_bundle(merge_ca_bundle(old + b"garbage", a), b)
    subjects = [cert.subject for cert in x509.load_pem_x509_certificates(bundle)]
    assert subjects == [x509.load_pem_x509_certificate(a).subject, x509.load_pem_x509_certificate(b).subject]
    assert merge_ca_bundle(bundle, a) == bundle and merge_ca_bundle(bundle, b) == bundle  # replicas agree: no rewrites
    trimmed = x509.load_pem_x509_certificates(merge_ca_bundle(bundle + c, a, keep=2))
    assert len(trimmed) == 2 and x509.load_pem_x509_certificate(a) in trimmed


def test_when_the_cluster_cannot_be_read_the_pod_is_refused_with_the_reason(cert: ServingCert) -> None:
    """Never pinned on a guess: the pod's controller creates it again once the apiserver answers."""
    from kubernetes import client

    from admission.kube import ApiRetrySettings, KubePort

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed when the block ends: nothing listens there
    cfg = client.Configuration()
    cfg.host = f"https://127.0.0.1:{dead}"
    port = KubePort(client.ApiClient(cfg), ApiRetrySettings(backoffs=(), request_timeout=2.0))
    server = WebhookServer(PodPinner(port), cert.cert_file, cert.key_file, bind="127.0.0.1", port=0).start()
    try:
        response = post(f"https://127.0.0.1:{server.port}", cert.ca_pem, review(exact_pod())).json()["response"]
    finally:
        server.stop()
    assert response["allowed"] is False and response["status"]["code"] == 503
    assert "cannot pin the pod to a planned node" in response["status"]["message"]


def test_a_pod_that_names_its_node_or_is_pinned_already_is_left_alone(offline: str, cert: ServingCert) -> None:
    bound = exact_pod(spec={"nodeName": "n7"})
    response = post(offline, cert.ca_pem, review(bound)).json()["response"]
    assert response["allowed"] is True and "patch" not in response and "spec.nodeName" in response["warnings"][0]
    again = exact_pod(annotations={"atoll.dev/node": "n0", "atoll.dev/slot": "0"})  # a reinvocation sees its own pin
    assert set(post(offline, cert.ca_pem, review(again)).json()["response"]) == {"uid", "allowed"}
