"""Real Kueue on a test apiserver: kube-controller-manager (the Job controller), kube-scheduler,
KWOK (fake nodes that heartbeat, pods that go Running once bound) and Kueue's manager, all from
the current control plane build (``ensure_current``); with the JobSet framework, JobSet's
controller too.

Kueue runs with its own internal certificate management, as a default install does, and its
webhooks are served as there, except for the route: its service has none on a test machine, so
every service reference points at Kueue's webhook server on loopback, and its Secret is filled
beforehand with a certificate its rotator keeps that is good for 127.0.0.1 too
(``_kueue_webhooks``). Its webhook configurations are registered as its kustomization builds them
(``config/components/webhook``: ``manifests.yaml``, with the patch and replacements that keep
``kube-system`` and ``kueue-system`` out, named ``kueue-...`` as its default overlay names them):
Kueue's Job and JobSet webhooks suspend what a user submits to a LocalQueue, and its Workload,
ClusterQueue, ResourceFlavor and Cohort webhooks default and validate every create and update,
Atoll's status writes included. The CRDs are installed as Kueue's own kustomization builds them:
every file of its ``crd/bases``, untouched, plus the conversion-webhook patches its
``crd/kustomization.yaml`` lists, pointed at the same loopback server (clients and Kueue both
speak v1beta2, the storage version, so no conversion is asked for in the tier).

JobSet's CRD is its module's ``crd/bases`` file, untouched (one version, v1alpha2, so the
conversion patch its kustomization adds is never called and is left out). Its controller serves
its webhooks on loopback with a certificate made here, and its own webhook configurations are
registered as its kustomization builds them (``config/components/webhook``: ``manifests.yaml``
with the patches that give its pod webhooks an objectSelector), each service reference turned
into that loopback URL with the certificate's CA: JobSet defaults and validates JobSets, and the
pods of its Jobs, itself.
"""

from __future__ import annotations

import base64
import copy
import os
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from tests.envtest._binaries import JOBSET_VERSION, KWOK_VERSION, Binaries, EnvtestError, go_module_dir
from tests.envtest._crds import KUEUE_VERSION, install_kueue_crds
from tests.envtest._kueue_webhooks import WEBHOOK_SECRET, WEBHOOK_SERVICE, kueue_webhook_certificates, kueue_webhook_configurations, loopback
from tests.envtest._server import ApiServer, _free_port, _tail, die_with_parent

__all__ = ["JOBSET_FRAMEWORK", "KUEUE_NAMESPACE", "KWOK_NODE_ANNOTATION", "KueueCluster", "kueue_crd_files"]

KUEUE_NAMESPACE = "kueue-system"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""KWOK manages the nodes annotated ``kwok.x-k8s.io/node: fake`` (its convention)."""
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
"""Kueue's name for its JobSet integration; with it in ``frameworks``, JobSet's controller runs too."""
_JOBSET_CRD = "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
_JOBSET_WEBHOOKS = "config/components/webhook"
_KUEUE_SHIPPED_CONFIG = "config/components/manager/controller_manager_config.yaml"

# KWOK's own stages: nodes turn Ready and heartbeat through Leases; bound pods turn Running; deleted
# pods go. Its pod-complete stage is left out, so a Job's pods run until the test ends them.
_KWOK_STAGES = ("kustomize/stage/node/fast/node-initialize.yaml",
                "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                "kustomize/stage/pod/fast/pod-ready.yaml", "kustomize/stage/pod/fast/pod-delete.yaml")


def kueue_crd_files(bases: Path) -> tuple[str, ...]:
    """Every CRD file of Kueue's ``crd/bases``, sorted."""
    return tuple(sorted(p.name for p in bases.glob("kueue.x-k8s.io_*.yaml")))


def _conversion_patches(crd_root: Path, base_url: str, ca_pem: bytes) -> dict[str, dict[str, Any]]:
    """CRD name -> ``spec.conversion`` of the patches Kueue's crd/kustomization.yaml applies, the
    service reference turned into ``base_url`` + its path with ``ca_pem`` as the caBundle."""
    kustomization = yaml.safe_load((crd_root / "kustomization.yaml").read_text())
    patches: dict[str, dict[str, Any]] = {}
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load((crd_root / entry["path"]).read_text())
        conversion = copy.deepcopy(patch["spec"]["conversion"])
        conversion["webhook"]["clientConfig"] = loopback(conversion["webhook"]["clientConfig"], base_url, ca_pem)
        patches[patch["metadata"]["name"]] = conversion
    return patches


def jobset_webhook_configurations(base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """JobSet's webhook configurations as its kustomization builds them (``manifests.yaml``, then
    each patch's ``replace`` of one webhook), named ``jobset-...`` as its default overlay names
    them, each service reference turned into ``base_url`` + its path with ``ca_pem`` as the caBundle."""
    import base64

    root = go_module_dir("sigs.k8s.io/jobset", JOBSET_VERSION) / _JOBSET_WEBHOOKS
    configs = {d["kind"]: d for d in yaml.safe_load_all((root / "manifests.yaml").read_text()) if d}
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    for patch in kustomization.get("patches") or []:
        config = configs[patch["target"]["kind"]]
        for op in yaml.safe_load((root / patch["path"]).read_text()):
            if op["op"] != "replace" or not op["path"].startswith("/webhooks/"):
                raise EnvtestError(f"JobSet's webhook patch {patch['path']}: {op['op']} {op['path']} is not understood here")
            config["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
    ca = base64.b64encode(ca_pem).decode()
    out = []
    for config in configs.values():
        config = copy.deepcopy(config)
        config["metadata"] = {"name": "jobset-" + config["metadata"]["name"]}
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca}
        out.append(config)
    return out


class KueueCluster:
    """``with KueueCluster(api) as cluster:``: the Job controller, the scheduler, KWOK and Kueue
    running against ``api`` (an ``ApiServer`` started from a current build) until the block ends."""

    def __init__(self, api: ApiServer, *, frameworks: tuple[str, ...] = ("batch/job",), start_timeout: float = 180.0,
                 kueue_config: dict[str, Any] | None = None) -> None:
        binaries: Binaries = api.binaries
        needed = ("kube_scheduler", "kube_controller_manager", "kueue", "kwok") + (("jobset",) if JOBSET_FRAMEWORK in frameworks else ())
        missing = [n for n in needed if getattr(binaries, n) is None]
        if missing:
            raise EnvtestError(f"the control plane at {binaries.kube_apiserver} has no {', '.join(missing)}: real Kueue needs "
                               "Atoll's own build (`python -m tests.envtest ensure` with Go on PATH), not "
                               "KUBEBUILDER_ASSETS or the Debian 1.20 fallback")
        self.api = api
        self.binaries = binaries
        self.frameworks = frameworks
        self.start_timeout = start_timeout
        self.kueue_config = dict(kueue_config or {})
        """Top-level fields of Kueue's Configuration set over the ones made here (a bench's A/B)."""
        self.health_port = 0
        self.metrics_port = 0
        self.jobset_health_port = 0
        self.kueue_webhook_port = 0
        self.kueue_certs = api.dir / "kueue-certs"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> KueueCluster:
        from kubernetes import client

        kueue_module = go_module_dir("sigs.k8s.io/kueue", KUEUE_VERSION)
        kwok_module = go_module_dir("sigs.k8s.io/kwok", KWOK_VERSION)
        api_client = self.api.api_client()
        certs = kueue_webhook_certificates(KUEUE_NAMESPACE)
        self.kueue_webhook_port = _free_port()
        kueue_url = f"https://127.0.0.1:{self.kueue_webhook_port}"
        self._install_crds(api_client, kueue_module / "config" / "components" / "crd", kueue_url, certs["ca.crt"])
        core = client.CoreV1Api(api_client)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=KUEUE_NAMESPACE)))
        # the Secret Kueue's default install creates, filled with what its certificate rotator keeps
        # (``_kueue_webhooks``); the rotator stops the manager at start when it is missing
        core.create_namespaced_secret(KUEUE_NAMESPACE, client.V1Secret(metadata=client.V1ObjectMeta(name=WEBHOOK_SECRET),
                                                                       data={k: base64.b64encode(v).decode() for k, v in certs.items()}))
        kubeconfig = str(self.api.kubeconfig_path)
        common = [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                  f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1"]
        self.api._spawn("kube-controller-manager", [
            str(self.binaries.kube_controller_manager), *common, f"--secure-port={_free_port()}",
            # the Job controller, garbage collection, and node lifecycle (it lifts the not-ready taint the
            # apiserver puts on every new node once KWOK reports it Ready)
            "--controllers=job-controller,garbage-collector-controller,node-lifecycle-controller",
            # a KWOK heartbeat late on two loaded cores must not turn a node NotReady (and tainted
            # unreachable) in the middle of a test that counts on every node
            "--node-monitor-grace-period=300s",
            "--use-service-account-credentials=false",
        ])
        self.api._spawn("kube-scheduler", [str(self.binaries.kube_scheduler), *common, f"--secure-port={_free_port()}"])
        stages = self.api.dir / "kwok-stages.yaml"
        stages.write_text("\n---\n".join((kwok_module / s).read_text() for s in _KWOK_STAGES))
        self.api._spawn("kwok", [
            str(self.binaries.kwok), f"--kubeconfig={kubeconfig}", f"--config={stages}", "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake", f"--server-address=127.0.0.1:{_free_port()}",
        ])
        if JOBSET_FRAMEWORK in self.frameworks:  # before Kueue: it sets up the integrations whose CRDs it finds
            self._start_jobset(api_client, kubeconfig)
        self._start_kueue(kubeconfig)
        hooks: Any = client.AdmissionregistrationV1Api(api_client)
        for config in kueue_webhook_configurations(kueue_url, certs["ca.crt"]):  # once Kueue serves them
            create = (hooks.create_mutating_webhook_configuration if config["kind"] == "MutatingWebhookConfiguration"
                      else hooks.create_validating_webhook_configuration)
            create(config)
        return self

    def _start_jobset(self, api_client: Any, kubeconfig: str) -> None:
        """JobSet's CRD from its module, untouched and established, then its controller, ready (its
        webhook server listening) before Kueue starts."""
        from kubernetes import client

        from admission.webhook import ensure_serving_cert

        crd = yaml.safe_load((go_module_dir("sigs.k8s.io/jobset", JOBSET_VERSION) / _JOBSET_CRD).read_text())
        ext: Any = client.ApiextensionsV1Api(api_client)
        ext.create_custom_resource_definition(crd)
        deadline = time.monotonic() + self.start_timeout
        while not any(c.type == "Established" and c.status == "True"
                      for c in (ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or [])):
            if time.monotonic() > deadline:
                raise EnvtestError(f"JobSet's CRD not established after {self.start_timeout}s")
            time.sleep(0.2)
        certs = self.api.dir / "jobset-certs"
        serving = ensure_serving_cert(certs, ["127.0.0.1", "localhost"], generate=True)
        self.jobset_health_port = _free_port()
        webhook_port = _free_port()
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.jobset_health_port}"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 300, "burst": 500},
        }
        path = self.api.dir / "jobset-config.yaml"
        path.write_text(yaml.safe_dump(config))
        self.api._spawn("jobset", [str(self.binaries.jobset), f"--config={path}", f"--kubeconfig={kubeconfig}",
                                   "--metrics-bind-address=0", "--zap-log-level=2"])
        self._wait_ready("jobset", self.jobset_health_port)
        assert serving.ca_pem is not None  # generated here
        hooks: Any = client.AdmissionregistrationV1Api(api_client)
        for config in jobset_webhook_configurations(f"https://127.0.0.1:{webhook_port}", serving.ca_pem):
            create = (hooks.create_mutating_webhook_configuration if config["kind"] == "MutatingWebhookConfiguration"
                      else hooks.create_validating_webhook_configuration)
            create(config)

    def _wait_ready(self, name: str, port: int, step: Any = None) -> None:
        """Until ``name``'s ``/readyz`` on ``port`` answers 200 (``step()`` runs on each poll); fails
        naming the program, or any of the cluster's programs that exited meanwhile."""
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if step is not None:
                step()
            for other, p in self.api._procs:
                if p.poll() is not None:
                    raise EnvtestError(f"{other} exited with {p.returncode} while {name} started; its log ends:\n"
                                       f"{_tail(self.api.dir / f'{other}.log')}")
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                if r.status_code == 200:
                    return
                last = f"/readyz answered HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                last = f"/readyz: {exc}"
            time.sleep(0.5)
        raise EnvtestError(f"{name} not ready after {self.start_timeout}s ({last}); its log ends:\n{_tail(self.api.dir / f'{name}.log')}")

    def _install_crds(self, api_client: Any, crd_root: Path, base_url: str, ca_pem: bytes) -> None:
        from kubernetes import client

        bases = crd_root / "bases"
        files = kueue_crd_files(bases)
        install_kueue_crds(api_client, bases, files=files)
        ext: Any = client.ApiextensionsV1Api(api_client)
        for name, conversion in _conversion_patches(crd_root, base_url, ca_pem).items():
            ext.patch_custom_resource_definition(name, {"spec": {"conversion": conversion}})

    def _mount_certs(self, certs: Path) -> bool:
        """What a kubelet does for Kueue's pod: the Secret its certificate rotator keeps, written as
        files into its certificate folder (the rotator waits for them there). True once written."""
        from kubernetes import client

        secret = client.CoreV1Api(self.api.api_client()).read_namespaced_secret(WEBHOOK_SECRET, KUEUE_NAMESPACE)
        data = secret.data or {}
        if not all(k in data for k in ("tls.crt", "tls.key", "ca.crt")):
            return False
        certs.mkdir(parents=True, exist_ok=True)
        for name in ("ca.crt", "tls.key", "tls.crt"):  # the certificate last: its presence is what the rotator looks for
            (certs / name).write_bytes(base64.b64decode(data[name]))
        return True

    def _start_kueue(self, kubeconfig: str) -> None:
        """Kueue's manager, with the controller concurrency and client limits of the Configuration
        Kueue ships (config/components/manager/controller_manager_config.yaml, read from its module):
        without ``groupKindConcurrency`` each of its controllers reconciles one object at a time,
        and its Workload controller, the one that turns a Workload Admitted once its checks are
        Ready, fell seconds behind at 20 new Workloads a second (``atoll bench kueue``)."""
        shipped = yaml.safe_load((go_module_dir("sigs.k8s.io/kueue", KUEUE_VERSION) / _KUEUE_SHIPPED_CONFIG).read_text())
        self.health_port, self.metrics_port = _free_port(), _free_port()
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "webhook": {"host": "127.0.0.1", "port": self.kueue_webhook_port, "certDir": str(self.kueue_certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE, "webhookSecretName": WEBHOOK_SECRET},
            "clientConnection": shipped["clientConnection"],
            "controller": {"groupKindConcurrency": shipped["controller"]["groupKindConcurrency"]},
            "integrations": {"frameworks": list(self.frameworks)},
            # its visibility API server delegates authentication to an in-cluster config, which a
            # process outside a pod has not; nothing here reads that API
            "featureGates": {"VisibilityOnDemand": False},
            **self.kueue_config,
        }
        path = self.api.dir / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        log = open(self.api.dir / "kueue.log", "wb")  # noqa: SIM115 - open while Kueue runs; closed with the apiserver's logs
        self.api._logs.append(log)
        proc = subprocess.Popen([str(self.binaries.kueue), f"--config={path}", "--zap-log-level=2"], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, preexec_fn=die_with_parent)
        self.api._procs.append(("kueue", proc))
        mounted = [False]

        def mount() -> None:
            mounted[0] = mounted[0] or self._mount_certs(self.kueue_certs)
        self._wait_ready("kueue", self.health_port, mount)

    def __enter__(self) -> KueueCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """The processes end with the ``ApiServer`` that runs them."""

    def metrics(self) -> str:
        """Kueue's Prometheus metrics text (served over HTTPS to a token the apiserver accepts, as
        Kueue serves them by default)."""
        r = httpx.get(f"https://127.0.0.1:{self.metrics_port}/metrics", headers={"Authorization": f"Bearer {self.api.token}"},
                      verify=False, timeout=10)
        r.raise_for_status()
        return r.text

    def log(self, name: str = "kueue") -> str:
        return _tail(self.api.dir / f"{name}.log", 20000)
