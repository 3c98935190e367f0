"""The node driver's Prometheus endpoint, scraped over HTTP while the kubelet prepares and unprepares claims."""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request

import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpudra.gpuplugin.agent import AgentOptions, DriverAgent
from gpudra.kubeletplugin.kubelet_client import KubeletClient
from tests.support.builders import allocated_claim

NODE = "node-m"


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metrics_count_prepares_unprepares_latencies_and_devices_by_state():
    root = tempfile.mkdtemp(prefix="gdm", dir="/tmp")  # short: unix socket paths
    claims = os.path.join(root, "claims")
    os.makedirs(claims)
    agent = DriverAgent(AgentOptions(node_name=NODE, profile="dgx-h100", root=root, claims_dir=claims, fsync=False,
                                     metrics_port=0))
    agent.start()
    kubelet = KubeletClient(agent.paths.registration_socket)
    try:
        kubelet.register()
        refs = []
        for name, device in (("a", "gpu-0"), ("b", "gpu-1"), ("bad", "gpu-99")):
            obj = allocated_claim(name, [{"request": "gpu", "device": device}], node_name=NODE)
            with open(os.path.join(claims, f"default_{name}.yaml"), "w", encoding="utf-8") as fh:
                yaml.safe_dump(obj, fh)
            refs.append(("default", name, obj["metadata"]["uid"]))
        before = _scrape(agent.metrics_port)
        assert before[("gpudra_devices", (("state", "published"),))] == 8
        assert before[("gpudra_devices", (("state", "prepared"),))] == 0
        answers = kubelet.prepare(refs).claims
        assert answers[refs[2][2]].error and not answers[refs[0][2]].error
        during = _scrape(agent.metrics_port)
        assert during[("gpudra_claim_requests_total", (("operation", "prepare"), ("result", "success")))] == 2
        assert during[("gpudra_claim_requests_total", (("operation", "prepare"), ("result", "error")))] == 1
        assert during[("gpudra_devices", (("state", "prepared"),))] == 2
        assert during[("gpudra_claim_request_duration_seconds_count", (("operation", "prepare"),))] == 3
        assert during[("gpudra_slice_publications_total", ())] == 1
        assert kubelet.unprepare(refs[:2]).claims[refs[0][2]].error == ""
        after = _scrape(agent.metrics_port)
        assert after[("gpudra_claim_requests_total", (("operation", "unprepare"), ("result", "success")))] == 2
        assert after[("gpudra_devices", (("state", "prepared"),))] == 0
        buckets = [v for (name, labels), v in after.items()
                   if name == "gpudra_claim_request_duration_seconds_bucket" and ("operation", "unprepare") in labels]
        assert max(buckets) == 2 and buckets == sorted(buckets)  # cumulative, +Inf holds all
    finally:
        kubelet.close()
        agent.stop()
        shutil.rmtree(root, ignore_errors=True)
