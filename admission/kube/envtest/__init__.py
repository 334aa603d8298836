"""A real control plane for tests and benchmarks: etcd plus kube-apiserver, with Kueue's CRDs.

``python -m admission.kube.envtest ensure`` finds or builds the binaries and finds (or downloads
once) Kueue's CRDs (CI runs it first); ``ApiServer`` starts them on loopback;
``install_kueue_crds`` loads the CRDs into it.
"""

from admission.kube.envtest._binaries import (
    APISERVER_VERSION,
    Binaries,
    EnvtestError,
    apiserver_cache_dir,
    cache_dir,
    ensure_binaries,
    find_binaries,
)
from admission.kube.envtest._crds import (
    KUEUE_CRD_FILES,
    KUEUE_MANIFEST_SHA256,
    KUEUE_VERSION,
    adapt_for_old_apiservers,
    download_kueue_crds,
    ensure_kueue_crds,
    install_kueue_crds,
    kueue_crd_dir,
    kueue_manifest_url,
)
from admission.kube.envtest._server import UNCACHED_RESOURCE, ApiServer

__all__ = [
    "APISERVER_VERSION",
    "KUEUE_CRD_FILES",
    "KUEUE_MANIFEST_SHA256",
    "KUEUE_VERSION",
    "UNCACHED_RESOURCE",
    "ApiServer",
    "Binaries",
    "EnvtestError",
    "adapt_for_old_apiservers",
    "apiserver_cache_dir",
    "cache_dir",
    "download_kueue_crds",
    "ensure_binaries",
    "ensure_kueue_crds",
    "find_binaries",
    "install_kueue_crds",
    "kueue_crd_dir",
    "kueue_manifest_url",
]
