"""A real control plane for tests and benchmarks: etcd plus kube-apiserver, with Kueue's CRDs.

``python -m admission.envtest ensure`` finds or builds the binaries (CI runs it first).
"""

from admission.envtest._binaries import APISERVER_VERSION, Binaries, EnvtestError, cache_dir, ensure_binaries, find_binaries
from admission.envtest._crds import KUEUE_CRD_FILES, adapt_for_old_apiservers, install_kueue_crds, kueue_crd_dir
from admission.envtest._server import ApiServer

__all__ = [
    "APISERVER_VERSION",
    "KUEUE_CRD_FILES",
    "ApiServer",
    "Binaries",
    "EnvtestError",
    "adapt_for_old_apiservers",
    "cache_dir",
    "ensure_binaries",
    "find_binaries",
    "install_kueue_crds",
    "kueue_crd_dir",
]
