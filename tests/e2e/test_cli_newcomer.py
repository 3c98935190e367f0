"""A newcomer's stumbles with the CLI (issue 35, point 5): each test fails on the code before its fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from click.testing import CliRunner

from gpudra.cli import cli


def invoke(*args: str, code: int):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result


def _claim(expression: str) -> str:
    return _claim_with(expression)


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


def _claim_with(*expressions: str) -> str:
    selectors = "".join(f'        - cel: {{expression: "{e}"}}\n' for e in expressions)
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
{selectors}"""


def test_validate_catches_quantity_literals_that_fail_every_evaluation(tmp_path):
    """`quantity("16GB")` and `quantity("16 Gi")` compile (cel-go folds only type conversions at planning,
    interpreter/decorators.go decOptimize; the API server accepts them) and fail each evaluation with
    resource.ParseQuantity's error: `validate` passed them, and they surfaced at allocation."""
    manifest = tmp_path / "claim.yaml"
    memory = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('{}')) >= 0"
    manifest.write_text(_claim_with(memory.format("16GB"), memory.format("16 Gi"), memory.format("16Gi"),
                                    "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('1.2')) >= 0",
                                    "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('1.2.3')) > 0"))
    # warnings, exit 0: the real API server accepts these selectors (tests/oracles/test_kube_validation.py)
    out = invoke("validate", "-f", str(manifest), code=0).output
    errors = [line for line in out.splitlines() if line.startswith("warning:") and "valid" in line]
    assert len(errors) == 3, out  # the valid literals pass
    assert ("selectors[0].cel.expression: quantity(\"16GB\") is not a valid quantity (quantities must match the "
            "regular expression") in errors[0]
    assert 'did you mean quantity("16Gi") (binary: 2^30 per G) or quantity("16G") (decimal: 10^9)?' in errors[0]
    assert "selectors[1]" in errors[1] and 'did you mean quantity("16Gi")?' in errors[1]
    assert "selectors[3]" in errors[2] and 'semver("1.2") is not a valid semver' in errors[2]
    assert 'did you mean semver("1.2.0")?' in errors[2]
    # the caret points at the literal
    assert "    " + memory.format("16GB") + "\n" + " " * (4 + memory.index("'{}'")) + "^" in out


def test_validate_checks_attribute_and_capacity_names_against_the_given_slices(tmp_path):
    """With the cluster's ResourceSlices given, a selector reading a name no device of its domain publishes fails
    on every such device ("no such key"): a typo gets the published name it is closest to, an amount read from
    the wrong map the right one. Without slices nothing is claimed."""
    from gpudra.api.dump import dump_yaml
    from gpudra.discovery import read_inventory
    from gpudra.gpuplugin.slices import build_resource_slices

    slices = tmp_path / "slices.yaml"
    slices.write_text(dump_yaml(build_resource_slices(read_inventory("simulated", profile="dgx-h100",
                                                                     node_name="n1"), "n1")))
    manifest = tmp_path / "claim.yaml"
    manifest.write_text(_claim_with(
        "device.attributes['gpu.nvidia.com'].prodcutName == 'NVIDIA H100 80GB HBM3'",
        "device.attributes['gpu.nvidia.com'].memory.compareTo(quantity('16Gi')) >= 0",
        "device.capacity['gpu.nvidia.com'].productName.compareTo(quantity('1')) > 0",
        "device.attributes['gpu.nvidia.com'].productName != '' && "
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('16Gi')) >= 0",
        "device.attributes['gpu.nvidia.com'].?prodcutName.orValue('') == ''",  # optional: missing is an answer
        "device.attributes['gpu.nvidia.co'].productName == 'x'"))
    invoke("validate", "-f", str(manifest), code=0)  # the API server accepts them all
    # warnings, still exit 0: the real API server accepts each (tests/oracles/test_kube_validation.py), and every allocation
    # on these slices fails on it, which is what each says
    out = invoke("validate", "-f", str(manifest), "-f", str(slices), code=0).output
    errors = [line for line in out.splitlines() if line.startswith("warning:") and "selectors[" in line]
    assert len(errors) == 4, out
    assert "selectors[0]" in errors[0] and "publishes an attribute named 'prodcutName'" in errors[0]
    assert "did you mean 'productName'?" in errors[0]
    assert "selectors[1]" in errors[1] and ("'memory' is a capacity of gpu.nvidia.com, not an attribute: write "
                                            "device.capacity[\"gpu.nvidia.com\"].memory") in errors[1]
    assert "selectors[2]" in errors[2] and "'productName' is an attribute of gpu.nvidia.com, not a capacity" in errors[2]
    assert "selectors[5]" in errors[3] and "did you mean 'gpu.nvidia.com'?" in errors[3]


MIG_CONFIG = "version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n"


def test_mig_on_simulated_gpus_needs_a_root_and_writes_nothing_under_var_lib(tmp_path):
    """`mig apply --backend simulated` without --root kept its simulated GPUs under /var/lib/gpudra-sim and asked
    for a republish in /var/lib/kubelet/plugins/gpu.nvidia.com (the real driver's directory)."""
    from gpudra.kubeletplugin.paths import DriverPaths

    config = tmp_path / "mig.yaml"
    config.write_text(MIG_CONFIG)
    system = DriverPaths(root="/")
    before = {p: os.path.lexists(p) for p in (os.path.dirname(system.simulated_state), system.plugin_dir)}
    refused = invoke("mig", "apply", "-f", str(config), "-c", "all-disabled", "--backend", "simulated", code=2)
    assert "--backend simulated changes simulated GPUs kept under --root: give --root DIR" in refused.stderr
    assert {p: os.path.lexists(p) for p in before} == before
    # with a root it runs there
    invoke("mig", "apply", "-f", str(config), "-c", "all-disabled", "--backend", "simulated", "--root",
           str(tmp_path / "node"), code=0)
    assert os.path.exists(DriverPaths(root=str(tmp_path / "node")).simulated_state)


def test_allocate_tries_nodes_in_the_same_order_in_every_mode(tmp_path):
    """--mode each and together choose the first node in name order (the scheduler's, and explain's), sequential
    walked the input's order: a claim that fits both of two nodes landed on `zeta` (given first) in sequential
    mode and on `alpha` in the others. Now every mode takes name order, or --node's order where it is given."""
    import json

    from gpudra.api.dump import dump_yaml
    from gpudra.discovery import read_inventory
    from gpudra.gpuplugin.slices import build_resource_slices, device_classes

    objects = [*device_classes("gpu.nvidia.com")]
    for node in ("zeta", "alpha"):  # file order is not name order
        objects += build_resource_slices(read_inventory("simulated", profile="l4-node", node_name=node), node)
    objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
                    "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    manifest = tmp_path / "all.yaml"
    manifest.write_text(dump_yaml(objects))
    for order, first in (([], "alpha"), (["--node", "zeta,alpha"], "zeta")):
        pools = {}
        for mode in ("sequential", "each", "together"):
            out = json.loads(invoke("allocate", "-f", str(manifest), "--mode", mode, "-o", "json", *order,
                                    code=0).stdout)
            [claim] = [o for o in out["items"] if o["kind"] == "ResourceClaim"] if "items" in out else [out]
            pools[mode] = {r["pool"] for r in claim["status"]["allocation"]["devices"]["results"]}
        assert pools == {"sequential": {first}, "each": {first}, "together": {first}}, order


def test_the_smaller_stumbles(tmp_path):
    """Issue 35's "smaller" list: `count: 0` passed without a note (the API server stores 1,
    pkg/apis/resource/v1/defaults.go); `memory >= 16` gave a bare overload error; `mig validate` had no
    did-you-mean for `1g.10GB`; `cluster down` without a cluster exited 2; `--kubernetes-version 1.34.1` printed
    three warnings and its summary counted one; `driver webhook --help` promised all of validate's checks."""
    claim = tmp_path / "claim.yaml"
    claim.write_text("""apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: r
      exactly: {deviceClassName: gpu.nvidia.com, count: 0}
""")
    out = invoke("validate", "-f", str(claim), code=0).output
    assert "spec.devices.requests[0].exactly.count: 0 is stored as 1 (the API server defaults" in out

    memory = tmp_path / "memory.yaml"
    memory.write_text(_claim("device.capacity['gpu.nvidia.com'].memory >= 16"))
    out = invoke("validate", "-f", str(memory), code=1).output
    assert "found no matching overload for '_>=_' applied to '(kubernetes.Quantity, int)' (a capacity is a " \
           "quantity, which compares with another quantity through its methods: e.g. " \
           "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('16Gi')) >= 0" in out

    mig = tmp_path / "mig.yaml"
    mig.write_text('version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n'
                   '    mig-devices: {"1g.10GB": 7}\n')
    out = invoke("mig", "validate", "-f", str(mig), "--gpu", "h100-80gb", code=1).output
    assert "'1g.10GB' is not a MIG profile name ([<C>c.]<G>g.<GB>gb[+attr]); did you mean '1g.10gb'?" in out

    gone = invoke("cluster", "down", "--dir", str(tmp_path / "no-cluster"), code=0)
    assert gone.stderr == f"no local cluster in {tmp_path / 'no-cluster'}: nothing to bring down\n"

    fixed = str(Path(__file__).resolve().parent.parent.parent / "examples" / "article-fixed")
    out = invoke("validate", "--kubernetes-version", "1.34.1", "-f", fixed, code=0).stderr
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    notes = [line for line in out.splitlines() if line.startswith("note: Kubernetes 1.34.1 has a known DRA issue")]
    assert len(notes) == 2 and out.rstrip().endswith(f"({len(warnings)} warning)")

    webhook = invoke("driver", "webhook", "--help", code=0).stdout
    assert "`gpudra validate`'s checks of those opaque configs only" in " ".join(webhook.split())


def test_the_suggested_v1_rewrite_of_the_articles_nvlink_claim_is_itself_valid(tmp_path):
    """validate's "write the request as (resource.k8s.io/v1)" kept the request's `constraints` (not a request
    field), its lookups by attribute name (always-empty maps) and the class `nvidia.com-gpu` (the extended
    resource's name, which no class has): pasting the suggestion gave new errors."""
    article = Path(__file__).resolve().parent.parent.parent / "examples" / "article" / "03-resourceclaim-nvlink.yaml"
    out = invoke("validate", "-f", str(article), code=1).output
    suggestion = out.split("write the request as (resource.k8s.io/v1):\n", 1)[1].split("\nerror:", 1)[0]
    request = yaml.safe_load("\n".join(line[4:] for line in suggestion.splitlines()))
    assert "constraints" not in request and "product-name" not in json.dumps(request)
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"  # the chart's class for nvidia.com/gpu
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [request]}}}
    pasted = tmp_path / "claim.yaml"
    pasted.write_text(yaml.safe_dump(claim))
    assert "error" not in invoke("validate", "-f", str(pasted), code=0).output


def test_a_kubeconfig_that_skips_tls_verification_is_honoured_quietly(tmp_path):
    """kubectl honours `insecure-skip-tls-verify: true` without a word; urllib3's InsecureRequestWarning text
    (`Unverified HTTPS request is being made…`, once per request) leaked to gpudra's stderr."""
    import datetime
    import ipaddress
    import ssl
    import subprocess
    import sys

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from support.fake_apiserver import FakeApiServer

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    with FakeApiServer([node]) as server:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
        server._server.socket = context.wrap_socket(server._server.socket, server_side=True)
        kubeconfig = server.kubeconfig(str(tmp_path / "kubeconfig"))
        config = json.loads(Path(kubeconfig).read_text())
        config["clusters"][0]["cluster"] = {"server": server.url.replace("http://", "https://"),
                                            "insecure-skip-tls-verify": True}
        Path(kubeconfig).write_text(json.dumps(config))
        root = Path(__file__).resolve().parent.parent.parent
        done = subprocess.run([sys.executable, "-m", "gpudra", "schedule", "--kubeconfig", kubeconfig],
                              capture_output=True, text=True, timeout=120, cwd=root,
                              env={**os.environ, "PYTHONPATH": str(root)})
    assert ("GET", "/version") in server.requests  # it did talk to the server over TLS
    assert "InsecureRequestWarning" not in done.stderr and "Unverified HTTPS" not in done.stderr, done.stderr


def test_the_models_plot_keeps_its_legend_off_the_bars_and_the_report_table_has_headings(tmp_path, monkeypatch):
    """Issue 35: the legend of `*-models.png` covered bars, and report.html's table showed the raw field names
    (served_ratio, allocation_ratio_std, …)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpudra.simulate import report
    from gpudra.simulate.sweep import Experiment, TraceSource, run_sweep
    from support.traces import NODES_CSV, PODS_CSV

    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    source = TraceSource("tiny", str(tmp_path / "nodes.csv"), str(tmp_path / "pods.csv"))
    results = run_sweep([Experiment(source, policy, 1, "dra", 1.5) for policy in ("fgd", "bestfit", "random")],
                        jobs=1)
    checked = []

    def capture(draw):
        figure, axes = plt.subplots(figsize=(7, 4.2), dpi=100)  # as report._figure_png draws
        draw(axes)
        figure.tight_layout()
        figure.canvas.draw()
        if axes.get_title().endswith("utilisation per GPU model at 100% arrived demand"):
            legend = axes.get_legend().get_window_extent()
            bars = [patch.get_window_extent() for patch in axes.patches]
            assert bars and not any(legend.overlaps(bar) for bar in bars)
            assert not legend.overlaps(axes.get_window_extent())  # below the plot, not on it
            assert figure.bbox.contains(legend.x0, legend.y0) and figure.bbox.contains(legend.x1, legend.y1)
            checked.append(True)
        plt.close(figure)
        return b"png"

    monkeypatch.setattr(report, "_figure_png", capture)
    images = report.plots(results)
    assert checked
    page = report.html_report(results, images)
    head = page.split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert ">GPU demand served (%)</th>" in head and 'title="served_ratio"' in head
    assert not any(f">{field}</th>" in head for field in report.SUMMARY_COLUMNS)
