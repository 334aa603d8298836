"""A real control plane for tests and benchmarks: etcd plus kube-apiserver, with Kueue's CRDs.

``python -m admission.kube.envtest ensure`` finds or builds the binaries (CI runs it first);
``ApiServer`` starts them on loopback; ``install_kueue_crds`` loads Kueue's CRDs into it.
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
from admission.kube.envtest._crds import KUEUE_CRD_FILES, adapt_for_old_apiservers, install_kueue_crds, kueue_crd_dir
from admission.kube.envtest._server import UNCACHED_RESOURCE, ApiServer

__all__ = [
    "APISERVER_VERSION",
    "KUEUE_CRD_FILES",
    "UNCACHED_RESOURCE",
    "ApiServer",
    "Binaries",
    "EnvtestError",
    "adapt_for_old_apiservers",
    "apiserver_cache_dir",
    "cache_dir",
    "ensure_binaries",
    "find_binaries",
    "install_kueue_crds",
    "kueue_crd_dir",
]
