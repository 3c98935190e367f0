"""No-crash concurrency: claims sharing one dynamic MIG device (admin access) and claims on other
MIG devices of the same GPU are prepared and unprepared by concurrent callers. Every acknowledged
prepare must find its MIG instance in the (simulated) hardware until it is unprepared, and no
prepare may fail: none of these claims conflict.

CI runs `GPUDRA_MIG_STRESS_PREPARES` prepares (default 1,200, a few seconds); the issue's
8,000 run is `GPUDRA_MIG_STRESS_PREPARES=8000 python -m pytest tests/gpuplugin/test_driver_mig_race.py`.
"""

from __future__ import annotations

import os
import threading

import yaml

from gpudra.discovery import open_backend
from tests.support.builders import allocated_claim
from gpudra.gpuplugin.state import ClaimRef, PrepareError

from test_driver_state import NODE, Env

PREPARES = int(os.environ.get("GPUDRA_MIG_STRESS_PREPARES", "1200"))
SHARED = "gpu-4-mig-1g10gb-19-0"  # two admin-access claims hold it at once
OTHERS = ["gpu-4-mig-1g10gb-19-2", "gpu-4-mig-2g20gb-14-4"]  # same GPU, not overlapping


def _admin_claim(env: Env, name: str, device: str) -> ClaimRef:
    obj = allocated_claim(name, [{"request": "r0", "device": device, "adminAccess": True}], node_name=NODE)
    with open(os.path.join(env.claims_dir, f"default_{name}.yaml"), "w") as fh:
        yaml.safe_dump(obj, fh)
    return ClaimRef("default", name, obj["metadata"]["uid"])


def test_shared_dynamic_mig_devices_under_concurrent_prepare_and_unprepare(tmp_path):
    env = Env(tmp_path)
    env.state.reconcile()
    refs = [_admin_claim(env, f"admin{i}", SHARED) for i in range(2)]
    refs += [env.claim(f"plain{i}", [device]) for i, device in enumerate(OTHERS)]
    hardware = open_backend("simulated", profile=env.profile, node_name=NODE, state_path=env.paths.simulated_state)
    counts = {"prepares": 0, "missing": 0, "errors": 0}
    problems: list[str] = []
    lock = threading.Lock()
    per_caller = PREPARES // len(refs)

    def present(ref) -> bool:
        entry = env.state.checkpoint_snapshot()["claims"][ref.uid]
        mig = entry["devices"][0]["mig"]
        device = hardware.find_mig_device(entry["devices"][0]["gpuMinor"], mig["giProfileId"], mig["start"])
        return device is not None and device.uuid == mig["uuid"]

    def caller(ref) -> None:
        for _ in range(per_caller):
            try:
                env.state.prepare(ref)
            except PrepareError as exc:
                with lock:
                    counts["errors"] += 1
                    problems.append(f"{ref.name}: {exc}")
                continue
            ok = present(ref)
            with lock:
                counts["prepares"] += 1
                counts["missing"] += not ok
                if not ok:
                    problems.append(f"{ref.name}: acknowledged but its MIG instance is gone")
            env.state.unprepare(ref)

    threads = [threading.Thread(target=caller, args=(ref,)) for ref in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == {"prepares": per_caller * len(refs), "missing": 0, "errors": 0}, problems[:5]
    assert [m for g in hardware.inventory().gpus for m in g.mig_devices] == []
    assert env.state.checkpoint_snapshot()["claims"] == {}
