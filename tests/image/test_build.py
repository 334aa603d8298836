"""``helm/image/build.sh``'s image, run with runc: it is what the Dockerfile describes, its entrypoint
answers on a read-only root as the unprivileged user, and the chart's pod (its init container, then
``atoll run`` with the chart's arguments) starts against the test apiserver, reaches ``/readyz``,
decides a Workload and stops cleanly."""

from __future__ import annotations

import json
import re
import shutil
import socket
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.admission.fabric import Fabric
from tests.helm.chart import by_kind, render
from tests.image.oci import ROOT, Bundle, Image

pytestmark = pytest.mark.image
UID = 65532


def _dockerfile() -> dict[str, str]:
    """The Dockerfile's runtime-stage instructions (the last of each), by keyword."""
    found: dict[str, str] = {}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        match = re.match(r"(ENTRYPOINT|CMD|USER|WORKDIR|EXPOSE) (.*)", line)
        if match:
            found[match.group(1)] = match.group(2).strip()
    return found


def test_the_image_is_the_dockerfiles_runtime_stage_and_the_charts_default_image(image: Image) -> None:
    config, docker = image.config(), _dockerfile()
    run = config["config"]
    assert run["Entrypoint"] == json.loads(docker["ENTRYPOINT"]) and run["Cmd"] == json.loads(docker["CMD"])
    assert (run["User"], run["WorkingDir"]) == (docker["USER"], docker["WORKDIR"])
    assert sorted(run["ExposedPorts"]) == sorted(f"{p}/tcp" for p in docker["EXPOSE"].split())
    env = dict(e.split("=", 1) for e in run["Env"])
    assert env["PATH"].startswith("/opt/atoll/venv/bin:") and env["NUMBA_CACHE_DIR"] == "/scratch/numba-cache"
    assert (config["os"], len(image.manifest()["layers"])) == ("linux", 2)  # Debian's layer, then Atoll's
    # The chart's default image is this one: its name, and the tag its appVersion (the package's version).
    chart = yaml.safe_load((ROOT / "helm" / "atoll" / "Chart.yaml").read_text())
    defaults = yaml.safe_load((ROOT / "helm" / "atoll" / "values.yaml").read_text())["image"]
    version = re.search(r'^version = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version and image.tag == chart["appVersion"] == version.group(1) and defaults["tag"] == ""
    assert defaults["repository"] == run["Labels"]["org.opencontainers.image.title"]


def _members(image: Image, layer: int) -> dict[str, tarfile.TarInfo]:
    algo, _, hexd = image.manifest()["layers"][layer]["digest"].partition(":")
    with tarfile.open(image.layout / "blobs" / algo / hexd, "r:gz") as tar:
        return {m.name.removeprefix("./"): m for m in tar.getmembers()}


def test_atolls_layer_holds_only_atoll_and_its_user_and_the_base_names_no_machine(image: Image) -> None:
    ours = _members(image, 1)
    outside = sorted(name for name in ours if not name.startswith(("opt/atoll/", "scratch")) and name not in
                     ("etc", "etc/passwd", "etc/group", "etc/shadow", "etc/gshadow", "opt", "opt/atoll", "tmp"))
    assert outside == []
    assert {"opt/atoll/venv/bin/atoll", "opt/atoll/venv/bin/python"} <= set(ours) and not any("/pip/" in n for n in ours)
    assert any(n.startswith("opt/atoll/numba-cache/") and n.endswith(".nbi") for n in ours)
    algo, _, hexd = image.manifest()["layers"][0]["digest"].partition(":")
    with tarfile.open(image.layout / "blobs" / algo / hexd, "r:gz") as tar:
        names = {n: tar.extractfile(f"./etc/{n}").read().decode() for n in ("hostname", "resolv.conf", "apt/sources.list")}  # type: ignore[union-attr]
    assert names == {"hostname": "localhost\n", "resolv.conf": "", "apt/sources.list": ""}


def test_the_entrypoint_answers_as_the_unprivileged_user_on_a_read_only_root(bundle: Bundle) -> None:
    spec = bundle.spec()
    assert (spec["process"]["user"]["uid"], spec["process"]["args"][0]) == (UID, "atoll")
    done = bundle.container(["atoll", "--help"]).run()
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\s+run\b", done.stdout, re.M), done.stdout
    done = bundle.container(["atoll", "run", "--help"]).run()
    assert done.returncode == 0, done.stderr
    assert "--kubeconfig" in done.stdout and "--leader-elect" in done.stdout
    probe = "import os; print(os.getuid()); open('/opt/atoll/x', 'w')"
    done = bundle.container(["python", "-c", probe]).run()
    assert done.stdout.split() == [str(UID)] and "Read-only file system" in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _readyz(port: int) -> tuple[int, str]:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    except httpx.TransportError:
        return 0, ""
    return r.status_code, r.text.strip()


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.apiserver
def test_the_charts_pod_starts_in_the_image_reaches_readyz_and_decides(bundle: Bundle, fabric: Fabric, apiserver: Any,
                                                                     tmp_path: Path) -> None:
    fabric.install()
    health = _free_port()
    values = {"metrics": {"port": _free_port()}, "health": {"port": health}, "webhook": {"enabled": False},
              "admissionCheck": {"name": fabric.check}}
    (deployment,) = by_kind(render(values, namespace=fabric.ns), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (init,), (main,) = pod["initContainers"], pod["containers"]
    # The pod's volumes: the scratch emptyDir (the image's user owns it, as fsGroup makes it), and
    # the kubeconfig standing in for the in-cluster service account.
    scratch, kube = tmp_path / "scratch", tmp_path / "kube"
    scratch.mkdir()
    shutil.chown(scratch, UID, UID)
    kube.mkdir(mode=0o755)
    shutil.copy(apiserver.kubeconfig_path, kube / "kubeconfig")
    (kube / "kubeconfig").chmod(0o644)
    tmp_path.chmod(0o755)
    binds = [(scratch, "/scratch", True), (kube, "/var/run/atoll/kube", False)]

    done = bundle.container(init["command"], binds=binds).run()  # the chart's init container: numba's cache to scratch
    assert done.returncode == 0, done.stderr
    copied = _files(scratch / "numba-cache")
    assert any(name.endswith(".nbi") for name in copied)

    env = {e["name"]: e["value"] for e in main["env"] if "value" in e} | {"POD_NAME": "atoll-image-0"}
    args = bundle.spec()["process"]["args"][:1] + main["args"] + ["--kubeconfig=/var/run/atoll/kube/kubeconfig"]
    container = bundle.container(args, env=env, binds=binds, host_network=True)
    log = tmp_path / "atoll.log"
    proc = container.start(log)
    try:
        deadline = time.monotonic() + 180
        while _readyz(health)[0] != 200 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _readyz(health) == (200, "leader: caches synced"), log.read_text()[-3000:]
        fabric.submit("train", [("main", 2, 4)])
        deadline = time.monotonic() + 120
        while fabric.entry("train")["state"] == "Pending" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fabric.entry("train")["state"] == "Ready", log.read_text()[-3000:]
    finally:
        code = container.stop(proc)
    output = log.read_text()
    assert code == 0, output[-3000:]
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{") and '"decision"' in line]
    assert [(r["workload"], r["outcome"]) for r in records if r.get("event") == "decision"] == [("train", "admit")]
    # The decision used the kernels compiled into the image: numba wrote nothing new to the cache.
    assert _files(scratch / "numba-cache") == copied
