"""The read-only cluster view that ``atoll explain`` and ``atoll queue`` share.

Both list the cluster once through a controller that writes nothing, rebuild the ledger as the
running controller would, and ask it about waiting Workloads. They take the same flags to find
the cluster and Atoll's configuration (the span-cost ones are ``atoll run``'s, with its
``ATOLL_*`` variables, so a span is priced as the controller prices it), and fail the same way when credentials do not load, so
that part lives here once.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from admission.cli._run import add_cost_args, configure_logging, cost_settings, credentials_error, default_namespace

__all__ = ["add_cluster_args", "read_only_controller"]


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    """The flags that find the cluster, the profiles ConfigMap, the check and the accelerator."""
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None,
                   help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("--namespace", default=default_namespace(os.environ),
                   help="namespace of the profiles ConfigMap (default: $ATOLL_NAMESPACE, else atoll-system)")
    p.add_argument("--configmap", default="atoll-policies")
    p.add_argument("--admission-check", default="atoll-topology", help="'*' for every Atoll check")
    p.add_argument("--gpu-resource", default="nvidia.com/gpu")
    add_cost_args(p, os.environ)


def read_only_controller(args: argparse.Namespace, prog: str, api_client: Any = None) -> Any:
    """A controller over the cluster ``args`` name that writes nothing, not yet synced; None (with
    the reason on stderr) when the credentials do not load."""
    from admission.controller import ConfigSettings, Controller, KueueSettings, Recorder, Settings
    from admission.kube import KubePort, api_client_from_kubeconfig

    configure_logging("warning")
    settings = Settings(kueue=KueueSettings(admission_check=None if args.admission_check in ("*", "") else args.admission_check,
                                            gpu_resource=args.gpu_resource),
                        config=ConfigSettings(namespace=args.namespace, configmap=args.configmap), cost=cost_settings(args))
    try:
        api = api_client or api_client_from_kubeconfig(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - any config failure ends here with its message
        print(credentials_error(prog, args.kubeconfig, exc), file=sys.stderr)
        return None
    return Controller(KubePort(api, settings.api), settings=settings, read_only=True, recorder=Recorder(sys.stderr))
