"""Pods, claim templates and the scheduling cycle.

Public API:

    from gpudra.scheduler import Cluster, Scheduler
    cluster = Cluster(objects)                 # dicts as loaded from YAML; workloads expanded, template claims created
    scheduler = Scheduler(cluster, policy="kube")
    results = scheduler.run()                  # list[PodResult], queue order; cluster objects updated in place
    info = scheduler.pod_info("ns/pod")        # PreFilter: claims, requests, pod-level reasons
    evaluation = scheduler.filter_node(info, "node-1", all_reasons=True)   # NodeEval; .result is a FilterResult
"""

from .cluster import Cluster, ClusterError
from .framework import FilterResult, PodResult, Reason, fit_error_message
from .scheduler import NodeEval, PodInfo, Scheduler, num_feasible_nodes_to_find
from .scoring import POLICIES

__all__ = [
    "Cluster",
    "ClusterError",
    "FilterResult",
    "NodeEval",
    "PodInfo",
    "PodResult",
    "POLICIES",
    "Reason",
    "Scheduler",
    "fit_error_message",
    "num_feasible_nodes_to_find",
]
