"""Running the scheduler on built objects and reading its answer (tests only)."""

from __future__ import annotations

from typing import Any


def schedule(objects: list[dict[str, Any]], policy: str = "kube"):
    import copy

    from gpudra.scheduler import Scheduler

    from gpudra.controllers import ManagedCluster

    cluster = ManagedCluster(copy.deepcopy(objects))
    scheduler = Scheduler(cluster, policy=policy)
    results = {r.pod: r for r in scheduler.run()}
    return cluster, scheduler, results


def placed(results: dict[str, Any]) -> dict[str, str | None]:
    return {key: result.node for key, result in results.items()}


def devices_of(cluster: Any, claim_key: str) -> list[str]:
    allocation = ((cluster.claims[claim_key].get("status") or {}).get("allocation") or {})
    return [f"{r['pool']}/{r['device']}" for r in (allocation.get("devices") or {}).get("results") or []]
