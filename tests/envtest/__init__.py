"""A real control plane for tests and benchmarks: etcd plus kube-apiserver, with Kueue's CRDs, and
(from Atoll's own build) kube-scheduler, kube-controller-manager, KWOK, Kueue's manager and JobSet's controller.

``python -m tests.envtest ensure`` finds or builds the binaries and finds Kueue's CRDs
(CI runs it first); ``ApiServer`` starts them on loopback; ``install_kueue_crds`` loads the CRDs
into it; ``KueueCluster`` runs real Kueue, the Job controller, the scheduler and KWOK on it (and
JobSet's controller, with Kueue's JobSet framework).
"""

from tests.envtest._binaries import (
    APISERVER_VERSION,
    CONTROL_PLANE_VERSION,
    JOBSET_VERSION,
    KWOK_VERSION,
    MIN_GO,
    Binaries,
    EnvtestError,
    apiserver_cache_dir,
    cache_dir,
    control_plane_cache_dir,
    ensure_binaries,
    ensure_current,
    find_binaries,
    find_current,
    go_module_dir,
)
from tests.envtest._cluster import JOBSET_FRAMEWORK, KUEUE_NAMESPACE, KWOK_NODE_ANNOTATION, KueueCluster, kueue_crd_files
from tests.envtest._crds import (
    KUEUE_CRD_FILES,
    KUEUE_MANIFEST_SHA256,
    KUEUE_VERSION,
    adapt_for_old_apiservers,
    download_kueue_crds,
    ensure_kueue_crds,
    install_kueue_crds,
    kueue_crd_dir,
    kueue_manifest_url,
    kueue_module_dir,
)
from tests.envtest._server import UNCACHED_RESOURCE, ApiServer

__all__ = [
    "APISERVER_VERSION",
    "CONTROL_PLANE_VERSION",
    "JOBSET_FRAMEWORK",
    "JOBSET_VERSION",
    "KUEUE_CRD_FILES",
    "KUEUE_MANIFEST_SHA256",
    "KUEUE_NAMESPACE",
    "KUEUE_VERSION",
    "KWOK_NODE_ANNOTATION",
    "KWOK_VERSION",
    "MIN_GO",
    "UNCACHED_RESOURCE",
    "ApiServer",
    "Binaries",
    "EnvtestError",
    "KueueCluster",
    "adapt_for_old_apiservers",
    "apiserver_cache_dir",
    "cache_dir",
    "control_plane_cache_dir",
    "download_kueue_crds",
    "ensure_binaries",
    "ensure_current",
    "ensure_kueue_crds",
    "find_binaries",
    "find_current",
    "go_module_dir",
    "install_kueue_crds",
    "kueue_crd_dir",
    "kueue_crd_files",
    "kueue_manifest_url",
    "kueue_module_dir",
]
