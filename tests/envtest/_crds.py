"""Find Kueue's CRDs and install them into a test apiserver.

Where they come from, first found wins (``ensure_kueue_crds``):

1. ``$ATOLL_KUEUE_CRDS``: a folder holding the six files (an error if it does not);
2. the Kueue Go module ``sigs.k8s.io/kueue@KUEUE_VERSION`` (``go mod download``, which the Go
   checksum database verifies): its ``config/components/crd/bases``, untouched;
3. Atoll's cache, ``<cache>/kueue/<KUEUE_VERSION>/`` (see ``cache_dir``);
4. Kueue's published release manifest for ``KUEUE_VERSION``, downloaded once, checked against
   its pinned sha256 (``KUEUE_MANIFEST_SHA256``, or ``$ATOLL_KUEUE_SHA256``), split into the six
   files and cached; without a pinned digest nothing is downloaded;
5. ``shared/kueue`` beside the repository, an offline copy.

A current apiserver takes the CRDs as Kueue generates them. Only the Kubernetes 1.20 fallback
needs them rewritten at load (``install_kueue_crds`` asks the server its version): 1.20 refuses the Workload CRD as generated: ``default: ""`` is invalid there, and a
list-map key must then be required. Its server-side-apply type builder also cannot read the
``anyOf`` generated for int-or-string fields; it then treats every list of the CRD as atomic, so
``status.admissionChecks`` would not merge by name. All three are fixed at load time by walking
the schema, and a release manifest's conversion webhook (Kueue's own, which no test runs) is
dropped; the files are never edited.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tests.envtest._binaries import EnvtestError, cache_dir, go_module_dir

__all__ = [
    "KUEUE_CRD_FILES",
    "KUEUE_MANIFEST_SHA256",
    "KUEUE_VERSION",
    "adapt_for_old_apiservers",
    "download_kueue_crds",
    "ensure_kueue_crds",
    "install_kueue_crds",
    "kueue_crd_dir",
    "kueue_manifest_url",
    "kueue_module_dir",
]

KUEUE_CRD_FILES = (
    "kueue.x-k8s.io_admissionchecks.yaml",
    "kueue.x-k8s.io_clusterqueues.yaml",
    "kueue.x-k8s.io_localqueues.yaml",
    "kueue.x-k8s.io_resourceflavors.yaml",
    "kueue.x-k8s.io_topologies.yaml",
    "kueue.x-k8s.io_workloads.yaml",
)

KUEUE_VERSION = "v0.19.2"
"""The Kueue release whose manifest is downloaded when no local copy is found."""

KUEUE_MANIFEST_SHA256: str | None = None
"""sha256 of ``manifests.yaml`` of ``KUEUE_VERSION`` as published. Unset until someone with access
to the release records it (``curl -sL <kueue_manifest_url()> | sha256sum``); until then a download
needs ``$ATOLL_KUEUE_SHA256``, so no unchecked file is ever used."""

_RELEASE_URL = "https://github.com/kubernetes-sigs/kueue/releases/download/{version}/manifests.yaml"
_HOW = ("set ATOLL_KUEUE_CRDS to a folder holding Kueue's six CRD files (config/components/crd/bases of a Kueue "
        "checkout), or set ATOLL_KUEUE_SHA256 to the sha256 of {url} to download it once")


def kueue_manifest_url(version: str = KUEUE_VERSION) -> str:
    """The release manifest's address; ``$ATOLL_KUEUE_MANIFEST_URL`` points at a mirror instead."""
    return os.environ.get("ATOLL_KUEUE_MANIFEST_URL") or _RELEASE_URL.format(version=version)


def _complete(folder: Path) -> bool:
    return all((folder / f).is_file() for f in KUEUE_CRD_FILES)


def _shared_copy() -> Path:
    # tests/envtest/_crds.py -> parents[2] is the repository root, parents[3] the folder holding it
    return Path(__file__).resolve().parents[3] / "shared" / "kueue"


def kueue_module_dir(version: str = KUEUE_VERSION) -> Path | None:
    """Kueue's Go module at ``version`` in Go's module cache, downloaded once and verified by the Go
    checksum database (``go mod download``); None without Go or when it cannot be had."""
    try:
        return go_module_dir("sigs.k8s.io/kueue", version)
    except (EnvtestError, OSError, subprocess.TimeoutExpired):
        return None


def _module_crds() -> Path | None:
    module = kueue_module_dir()
    folder = module / "config" / "components" / "crd" / "bases" if module else None
    return folder if folder is not None and _complete(folder) else None


def _cached() -> Path:
    return cache_dir() / "kueue" / KUEUE_VERSION


def _pinned_sha256() -> str | None:
    return (os.environ.get("ATOLL_KUEUE_SHA256") or KUEUE_MANIFEST_SHA256 or "").strip().lower() or None


def _split_manifest(text: str, source: str) -> dict[str, str]:
    """The six CRDs of a release manifest, by file name, each as its own YAML document."""
    wanted = {f.removeprefix("kueue.x-k8s.io_").removesuffix(".yaml") + ".kueue.x-k8s.io": f for f in KUEUE_CRD_FILES}
    found: dict[str, str] = {}
    for doc in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # noqa: S506 - a safe loader
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            name = (doc.get("metadata") or {}).get("name")
            if name in wanted:
                found[wanted[name]] = yaml.safe_dump(doc, sort_keys=False)
    missing = sorted(set(KUEUE_CRD_FILES) - set(found))
    if missing:
        raise EnvtestError(f"{source}: the manifest lacks {', '.join(missing)}")
    return found


def download_kueue_crds(target: Path, url: str, sha256: str, timeout: float = 30.0) -> Path:
    """Fetch the release manifest, refuse it unless its sha256 matches, write the six CRDs to
    ``target`` (all or nothing: a folder is renamed into place)."""
    import httpx

    try:
        response = httpx.get(url, follow_redirects=True, timeout=timeout)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise EnvtestError(f"cannot download {url}: {exc}") from exc
    digest = hashlib.sha256(response.content).hexdigest()
    if digest != sha256:
        raise EnvtestError(f"{url}: sha256 {digest} is not the pinned {sha256}; refusing the file")
    files = _split_manifest(response.text, url)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    for name, text in files.items():
        (staging / name).write_text(text)
    (staging / "SOURCE").write_text(f"{url}\nsha256 {digest}\n")
    try:
        staging.rename(target)
    except OSError:  # another process cached it first: keep theirs
        for child in staging.iterdir():
            child.unlink()
        staging.rmdir()
        if not _complete(target):
            raise
    return target


def ensure_kueue_crds(*, download: bool = True) -> Path:
    """The folder holding Kueue's six CRD files, by the order in the module docstring; raise
    ``EnvtestError`` with one line saying what is missing and how to provide it."""
    env = os.environ.get("ATOLL_KUEUE_CRDS")
    if env:
        folder = Path(env).expanduser()
        if not _complete(folder):
            missing = [f for f in KUEUE_CRD_FILES if not (folder / f).is_file()]
            raise EnvtestError(f"ATOLL_KUEUE_CRDS={folder}: missing {', '.join(missing)}; point it at Kueue's "
                               "config/components/crd/bases or unset it")
        return folder
    module = _module_crds()
    if module is not None:
        return module
    cached = _cached()
    if _complete(cached):
        return cached
    url, sha = kueue_manifest_url(), _pinned_sha256()
    problem = f"no Kueue CRDs (not in ATOLL_KUEUE_CRDS, {cached}, nor {_shared_copy()})"
    if download and sha:
        try:
            return download_kueue_crds(cached, url, sha)
        except EnvtestError as exc:
            problem = f"{problem}; {exc}"
    if _complete(_shared_copy()):
        return _shared_copy()
    if not sha:
        problem += f"; Kueue {KUEUE_VERSION}'s manifest has no pinned sha256, so it is not downloaded"
    raise EnvtestError(f"{problem}; {_HOW.format(url=url)}")


def kueue_crd_dir() -> Path | None:
    """``ensure_kueue_crds()``, or None when they cannot be found."""
    try:
        return ensure_kueue_crds()
    except EnvtestError:
        return None


def _adapt(schema: Any) -> None:
    if isinstance(schema, list):
        for value in schema:
            _adapt(value)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("default") == "":
        del schema["default"]
    if schema.get("x-kubernetes-int-or-string"):
        # quantities and ports become untyped preserved values (their pattern is not checked)
        description = schema.get("description")
        schema.clear()
        schema["x-kubernetes-preserve-unknown-fields"] = True
        if description:
            schema["description"] = description
        return
    for value in schema.values():
        _adapt(value)
    if schema.get("x-kubernetes-list-type") == "map":
        items = schema.get("items", {})
        props = items.get("properties", {})
        required = items.setdefault("required", [])
        for key in schema.get("x-kubernetes-list-map-keys", []):
            if key in props and "default" not in props[key] and key not in required:
                required.append(key)


def adapt_for_old_apiservers(crd: dict[str, Any]) -> dict[str, Any]:
    """Drop empty-string defaults, mark default-less list-map keys required, turn int-or-string
    leaves into preserved untyped values, in every version's schema, and drop a conversion
    webhook (in place)."""
    spec = crd.get("spec", {})
    if (spec.get("conversion") or {}).get("strategy") == "Webhook":
        spec["conversion"] = {"strategy": "None"}
    for version in crd.get("spec", {}).get("versions", []):
        _adapt(version.get("schema", {}).get("openAPIV3Schema", {}))
    return crd


def _load(path: Path, adapt: bool) -> dict[str, Any]:
    # libyaml when present: the Workload CRD is ~1 MB of YAML, ~10x faster to parse in C
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path}: expected one CustomResourceDefinition document")
    return adapt_for_old_apiservers(crd) if adapt else crd


def _server_needs_adapting(api_client: Any) -> bool:
    """True for an apiserver older than 1.25 (the 1.20 fallback), which refuses the CRDs as generated."""
    from kubernetes import client

    info = client.VersionApi(api_client).get_code()
    minor = int("".join(ch for ch in str(info.minor) if ch.isdigit()) or 0)
    return (int(info.major), minor) < (1, 25)


def install_kueue_crds(api_client: Any, crd_dir: Path, timeout: float = 60.0, files: tuple[str, ...] = KUEUE_CRD_FILES) -> list[str]:
    """Create (or replace) Kueue's CRDs (the six Atoll uses unless ``files`` names others) and wait
    until each is Established and its resource answers a list; returns the CRD names. They load
    as written on a current apiserver, adapted (``adapt_for_old_apiservers``) on 1.20."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext: Any = client.ApiextensionsV1Api(api_client)  # bodies are plain dicts, as loaded from YAML
    custom = client.CustomObjectsApi(api_client)
    adapt = _server_needs_adapting(api_client)
    crds = [_load(crd_dir / f, adapt) for f in files]
    for crd in crds:
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = ext.read_custom_resource_definition(crd["metadata"]["name"])
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        name, group, plural = crd["metadata"]["name"], crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        while True:
            conds = {c.type: c.status for c in (ext.read_custom_resource_definition(name).status.conditions or [])}
            if conds.get("Established") == "True":
                try:
                    custom.list_cluster_custom_object(group, version, plural, limit=1)
                    break
                except ApiException as exc:
                    if exc.status != 404:  # discovery lags Established by a moment on a fresh server
                        raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not served after {timeout}s (conditions: {conds})")
            time.sleep(0.1)
    return [crd["metadata"]["name"] for crd in crds]
