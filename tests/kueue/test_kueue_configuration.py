"""The tier's Kueue runs as Kueue's shipped Configuration has it run: its controllers reconcile as
many objects at once as that Configuration says (without ``groupKindConcurrency`` each reconciles
one at a time, and a Workload whose checks turned Ready waited seconds to be admitted)."""

from __future__ import annotations

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.envtest import KUEUE_VERSION, go_module_dir
from tests.kueue.conftest import Live

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

SHIPPED = "config/components/manager/controller_manager_config.yaml"
CONTROLLERS = {"Workload.kueue.x-k8s.io": "workload_controller", "ClusterQueue.kueue.x-k8s.io": "clusterqueue_controller",
               "LocalQueue.kueue.x-k8s.io": "localqueue_controller"}


def test_kueues_controllers_reconcile_as_many_at_once_as_its_shipped_configuration_says(live: Live) -> None:
    shipped = yaml.safe_load((go_module_dir("sigs.k8s.io/kueue", KUEUE_VERSION) / SHIPPED).read_text())
    concurrency = shipped["controller"]["groupKindConcurrency"]
    running = {s.labels["controller"]: s.value for f in text_string_to_metric_families(live.cluster.metrics()) for s in f.samples
               if s.name == "controller_runtime_max_concurrent_reconciles"}
    for kind, controller in CONTROLLERS.items():
        assert running.get(controller) == concurrency[kind], (controller, running.get(controller), concurrency[kind])
    assert running["workload_controller"] > 1  # the setting this tier lacked: one Workload at a time
