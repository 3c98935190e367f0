"""A newcomer's stumbles with the CLI (issue 35, point 5): each test fails on the code before its fix."""

from __future__ import annotations

from click.testing import CliRunner

from gpudra.cli import cli


def invoke(*args: str, code: int):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result


def _claim(expression: str) -> str:
    return f"""apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: c}}
spec:
  devices:
    requests:
    - name: r
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {{expression: "{expression}"}}
"""


def test_validate_takes_the_api_servers_feature_gates(tmp_path):
    """`validate` answered for the release's default gates only, although its own message names the gate that
    would accept the expression: `--features` (the option schedule/explain/allocate share) sets the gates of the
    API server it validates as, for the CEL environment (DRAListTypeAttributes adds `includes`,
    DRAConsumableCapacity `device.allowMultipleAllocations`) and for the gated fields it keeps."""
    list_type = tmp_path / "list.yaml"
    list_type.write_text(_claim("device.attributes['gpu.nvidia.com'].productName.includes('H100')"))
    refused = invoke("validate", "-f", str(list_type), code=1)
    assert "accepted with the DRAListTypeAttributes feature gate on" in refused.output
    invoke("validate", "-f", str(list_type), "--features", "default,+DRAListTypeAttributes", code=0)

    capacity = tmp_path / "capacity.yaml"
    capacity.write_text(_claim("device.allowMultipleAllocations == false"))
    invoke("validate", "-f", str(capacity), code=0)  # on by default in 1.36
    off = invoke("validate", "-f", str(capacity), "--features", "default,-DRAConsumableCapacity", code=1)
    assert "undefined field 'allowMultipleAllocations'" in off.output

    # a gated field: warned about where the gate is off, not where --features turns it on
    slice_manifest = tmp_path / "slice.yaml"
    slice_manifest.write_text("""apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: s}
spec:
  driver: gpu.nvidia.com
  nodeName: n
  pool: {name: n, resourceSliceCount: 1}
  sharedCounters:
  - name: gpu-0
    counters: {memory: {value: 40Gi}}
  devices:
  - name: gpu-0
    consumesCounters:
    - counterSet: gpu-0
      counters: {memory: {value: 40Gi}}
""")
    warned = invoke("validate", "-f", str(slice_manifest), "--kubernetes-version", "1.34", code=0)
    assert "needs the DRAPartitionableDevices feature gate" in warned.output
    quiet = invoke("validate", "-f", str(slice_manifest), "--kubernetes-version", "1.34", "--features",
                   "default,+DRAPartitionableDevices", code=0)
    assert "DRAPartitionableDevices" not in quiet.output
    turned_off = invoke("validate", "-f", str(capacity), "--features", "default,-DRAConsumableCapacity", code=1)
    assert "Traceback" not in turned_off.output
    assert "unknown feature 'Nope'" in invoke("validate", "-f", str(capacity), "--features", "+Nope", code=2).stderr
