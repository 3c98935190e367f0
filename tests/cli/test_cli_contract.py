"""Issue 11's "Why", one test each: the command line behaves the same everywhere (gpudra.cli's spine).

Every command that reads manifests reads them the same way, refuses invalid ones the same way, spells its
errors `error: WHERE: message` and maps its answer to one exit code: 0 yes, 1 no, 2 could not ask."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading

from dataclasses import dataclass

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli

from support.fake_http import write_kubeconfig
from tests.support.builders import claim, pod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
CLUSTER = os.path.join(EXAMPLES, "cluster")


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def gpudra(*args: str, stdin: str | None = None) -> Ran:
    """The command line in-process (what `gpudra ARGS` runs, through the same error contract), for speed;
    the test that needs a real process (a closed pipe) starts one."""
    result = CliRunner().invoke(cli, list(args), input=stdin if stdin is not None else "", prog_name="gpudra")
    return Ran(result.exit_code, result.stdout, result.stderr)


def _write(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


GOOD_CLASS = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: gpu\nspec: {}\n"
# A claim the API server refuses (a negative count) that would otherwise fit on the example cluster.
INVALID_CLAIM = yaml.safe_dump(claim("zero", count=-1, device_class_name="gpu.nvidia.com"))
# One more H100 than any example node has: valid, never allocatable; and a pod that needs it.
TOO_BIG_CLAIM = yaml.safe_dump(claim("nine", count=9, device_class_name="gpu.nvidia.com"))
TOO_BIG_POD = yaml.safe_dump(pod("big", claims={"gpu": "nine"}))


# --- invalid input: one policy for allocate, schedule and explain ------------------------------------------


@pytest.mark.parametrize("command", [["allocate"], ["schedule"], ["explain", "claim/zero"]])
def test_invalid_manifests_stop_allocate_schedule_and_explain_alike(tmp_path, command: list[str]) -> None:
    path = _write(tmp_path / "zero.yaml", INVALID_CLAIM)
    result = gpudra(*command, "-f", CLUSTER, "-f", path)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"error: {path}:doc 1 (ResourceClaim/zero): spec.devices.requests[0].exactly.count:")
    assert "--no-validate" in result.stderr
    validate = gpudra("validate", "-f", path)
    assert validate.returncode == 1
    assert first.removeprefix("error: ") in validate.stdout
    allowed = gpudra(*command, "-f", CLUSTER, "-f", path, "--no-validate")
    assert allowed.returncode in (0, 1) and "Traceback" not in allowed.stderr
    assert "(1 device of class )" not in allowed.stdout and "DeviceClass '' does not exist" not in allowed.stdout


# --- one -o vocabulary ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["validate", "-f", os.path.join(EXAMPLES, "article-fixed")],
                                     ["allocate", "-f", CLUSTER, "-f", os.path.join(EXAMPLES, "article-fixed")],
                                     ["schedule", "-f", CLUSTER, "-f", os.path.join(EXAMPLES, "workloads")],
                                     ["explain", "-f", CLUSTER, "-f", os.path.join(EXAMPLES, "article-fixed"),
                                      "claim/gpu-claim"]])
def test_every_reporting_command_takes_table_wide_yaml_and_json(command: list[str]) -> None:
    outputs = {}
    for output in ("table", "wide", "yaml", "json"):
        result = gpudra(*command, "-o", output)
        assert result.returncode in (0, 1), (output, result.stderr)
        outputs[output] = result.stdout
    documents = [document for document in yaml.safe_load_all(outputs["yaml"]) if document is not None]
    as_json = json.loads(outputs["json"])
    # one value (a List, a report, a problem list) or a `---` stream of the List's items
    assert documents == [as_json] or documents == as_json.get("items")
    with pytest.raises(json.JSONDecodeError):
        json.loads(outputs["table"] or "not json")


# --- one error prefix, one wording ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["validate"], ["allocate"], ["schedule"], ["explain", "pod/x"],
                                     ["mig", "plan", "--gpu", "h100-80gb"], ["mig", "validate"],
                                     ["demo", "--allocate-only", "--cluster"], ["cdi", "validate"]])
def test_a_missing_file_reads_the_same_in_every_command(command: list[str]) -> None:
    missing = "/no/such/file.yaml"
    args = [*command, missing] if command[-1] in ("--cluster", "validate") and command[0] in ("demo", "cdi") \
        else [*command, "-f", missing]
    result = gpudra(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == f"error: {missing}: no such file or directory"


MISSING = "/no/such/file.yaml"


@pytest.mark.parametrize("command", [
    ["mig", "apply", "-f", MISSING, "-c", "all-disabled", "--backend", "simulated"],
    ["mig", "manager", "-f", MISSING, "--kubeconfig", MISSING],
    ["discover", "--backend", "simulated", "--profile", MISSING],
    ["simulate", "--nodes", MISSING, "--pods", MISSING],
])
def test_a_missing_file_of_another_option_reads_the_same_too(command: list[str]) -> None:
    result = gpudra(*command)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1].endswith(f"{MISSING}: no such file or directory"), result.stderr
    assert result.stderr.startswith("error: ") and "Errno" not in result.stderr, result.stderr


@pytest.mark.parametrize("command", [["allocate"], ["schedule"], ["explain", "pod/x"]])
def test_a_missing_kubeconfig_reads_the_same_in_every_command(tmp_path, command: list[str]) -> None:
    result = gpudra(*command, "--kubeconfig", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert result.stderr == f"error: cannot load kubeconfig {tmp_path / 'nope'}: no such file or directory\n"


# --- exit codes: the answer, not the mood ---------------------------------------------------------------------


def test_negative_answers_exit_1(tmp_path) -> None:
    claim = _write(tmp_path / "nine.yaml", TOO_BIG_CLAIM)
    pod = _write(tmp_path / "pod.yaml", TOO_BIG_POD)
    assert gpudra("allocate", "-f", CLUSTER, "-f", claim).returncode == 1
    assert gpudra("schedule", "-f", CLUSTER, "-f", claim, "-f", pod).returncode == 1
    assert gpudra("explain", "-f", CLUSTER, "-f", claim, "-f", pod, "pod/big", "--no-fixes").returncode == 1
    assert gpudra("validate", "-f", os.path.join(EXAMPLES, "article")).returncode == 1


def test_positive_answers_exit_0() -> None:
    fixed = os.path.join(EXAMPLES, "article-fixed")
    assert gpudra("validate", "-f", fixed).returncode == 0
    assert gpudra("allocate", "-f", CLUSTER, "-f", fixed, "--mode", "each").returncode == 0
    assert gpudra("explain", "-f", CLUSTER, "-f", fixed, "claim/gpu-claim").returncode == 0


def test_invalid_mig_and_cdi_files_are_negative_answers(tmp_path) -> None:
    mig = _write(tmp_path / "mig.yaml", "version: v1\nmig-configs:\n  bad:\n  - devices: all\n"
                                        "    mig-enabled: true\n    mig-devices: {7g.80gb: 2}\n")
    assert gpudra("mig", "validate", "-f", mig, "--gpu", "h100-80gb").returncode == 1
    cdi = _write(tmp_path / "cdi.yaml", "cdiVersion: 0.6.0\nkind: bad\ndevices: []\n")
    assert gpudra("cdi", "validate", cdi).returncode == 1


def test_mig_and_cdi_validate_name_the_file_once_in_the_one_error_style(tmp_path) -> None:
    config = "version: v1\nmig-configs:\n  bad:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {7g.80gb: 2}\n"
    mig = _write(tmp_path / "mig.yaml", config)
    plain = gpudra("mig", "validate", "-f", mig, "--gpu", "h100-80gb")
    # the problems on stdout, the summary on stderr, as `gpudra validate` prints them
    errors = [line for line in plain.stdout.splitlines() if line.startswith("error:")]
    assert errors and all(line.startswith(f"error: {mig}: mig-configs.bad[0]: ") for line in errors), plain.stdout
    configmap = _write(tmp_path / "cm.yaml", yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mig-parted", "namespace": "gpu-operator"},
        "data": {"config.yaml": config}}))
    wrapped = gpudra("mig", "validate", "-f", configmap, "--gpu", "h100-80gb")
    errors = [line for line in wrapped.stdout.splitlines() if line.startswith("error:")]
    assert errors and all(line.startswith(f"error: {configmap}:doc 1 (ConfigMap/mig-parted): "
                                          "data['config.yaml'].mig-configs.bad[0]: ") for line in errors), wrapped.stdout
    assert wrapped.returncode == plain.returncode == 1
    not_cdi = gpudra("cdi", "validate", mig)  # a mig-parted file given to cdi validate
    assert not_cdi.returncode == 1
    assert not_cdi.stdout.startswith(f"error: {mig}: ") and not_cdi.stdout.count("mig.yaml") == 1, not_cdi.stdout


# --- input policy ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["validate"], ["allocate"], ["schedule"], ["explain", "claim/x"]])
def test_every_bad_file_of_a_directory_is_reported(tmp_path, command: list[str]) -> None:
    folder = tmp_path / "m"
    _write(folder / "a-good.yaml", GOOD_CLASS)
    _write(folder / "b-broken.yaml", "kind: [unclosed\n")
    _write(folder / "c-empty.yaml", "# only a comment\n")
    _write(folder / "d-helm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.name }}\n")
    _write(folder / "e-kustomization.yaml", "resources:\n- a-good.yaml\n")
    result = gpudra(*command, "-f", str(folder))
    assert result.returncode == 2, result.stderr
    assert f"error: {folder}/b-broken.yaml:2:1: invalid YAML" in result.stderr
    assert f"error: {folder}/c-empty.yaml: no Kubernetes objects" in result.stderr
    assert f"error: {folder}/d-helm.yaml:4: looks like a Helm template ({{{{ … }}}})" in result.stderr
    assert f"error: {folder}/e-kustomization.yaml:1: looks like a Kustomize kustomization" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("error: ") == 4
    if command == ["validate"]:  # the file that was read is fine, but the run is not "valid"
        assert result.stderr.splitlines()[-1] == "1 object in 1 file: 0 errors, 0 warnings; 4 files not read"


def test_validate_counts_the_objects_of_a_list_not_its_documents(tmp_path) -> None:
    classes = [yaml.safe_load(GOOD_CLASS.replace("name: gpu", f"name: gpu-{i}")) for i in range(6)]
    listed = _write(tmp_path / "list.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": classes}))
    single = _write(tmp_path / "one.yaml", GOOD_CLASS)
    assert gpudra("validate", "-f", listed).stderr.splitlines()[-1] == "6 objects in 1 file are valid"
    assert gpudra("validate", "-f", listed, "-f", single).stderr.splitlines()[-1] == "7 objects in 2 files are valid"
    assert gpudra("validate", "-f", single).stderr.splitlines()[-1] == "1 object in 1 file is valid"
    assert gpudra("validate", "-f", "-", stdin=GOOD_CLASS).stderr.splitlines()[-1] == "1 object on stdin is valid"
    invalid = _write(tmp_path / "zero.yaml", INVALID_CLAIM)
    result = gpudra("validate", "-f", listed, "-f", invalid)
    assert result.returncode == 1
    assert re.fullmatch(r"7 objects in 2 files: 1 error, \d+ warnings?", result.stderr.splitlines()[-1])


@pytest.mark.parametrize("command", [["validate"], ["allocate"], ["schedule"], ["explain", "claim/x"]])
def test_empty_input_is_an_error_not_zero_valid_documents(tmp_path, command: list[str]) -> None:
    (tmp_path / "nothing-here").mkdir()
    for args, stdin in ((["-f", "-"], ""), (["-f", _write(tmp_path / "empty.yaml", "")], None),
                        (["-f", str(tmp_path / "nothing-here")], None),
                        (["-f", os.path.join(ROOT, "README.md")], None)):
        result = gpudra(*command, *args, stdin=stdin)
        assert result.returncode == 2, (args, result.stderr)
        assert "valid" not in result.stderr.replace("invalid", "")
        assert result.stderr.startswith("error: "), result.stderr


def test_a_closed_pipe_after_validate_is_quiet() -> None:
    """`gpudra validate … | head -1` printed "internal error … BrokenPipeError; please report it"."""
    result = subprocess.run(f"{sys.executable} -m gpudra validate -q -f examples/article | head -1", shell=True,
                            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.stdout.startswith("error: examples/article/01-deviceclass.yaml:doc 1")
    assert result.stderr == ""


def test_a_closed_stdout_is_a_message_not_an_internal_error() -> None:
    """`gpudra validate … >&-` (cron, a daemon without stdout) printed an AttributeError traceback."""
    result = subprocess.run(f"{sys.executable} -m gpudra validate -f examples/article-fixed >&-", shell=True,
                            executable="/bin/bash", cwd=ROOT, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: standard output is closed"), result.stderr
    assert "Traceback" not in result.stderr


def test_an_api_server_that_never_answers_ends_in_a_timeout_not_a_hang(tmp_path) -> None:
    """Accepts the connection, reads the request, never answers: --request-timeout ends the wait."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), listener.getsockname())
        for command in (["schedule"], ["allocate"], ["explain", "pod/x"]):
            result = gpudra(*command, "--kubeconfig", kubeconfig, "--request-timeout", "1s")
            assert result.returncode == 2, (command, result.stderr)
            assert "did not answer" in result.stderr and "--request-timeout" in result.stderr, result.stderr
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


# --- honest answers --------------------------------------------------------------------------------------------


def test_an_unknown_node_is_an_error_not_every_claim_unallocatable() -> None:
    result = gpudra("allocate", "-f", CLUSTER, "-f", os.path.join(EXAMPLES, "article-fixed"), "--node", "nosuch")
    assert result.returncode == 2
    assert "error: --node nosuch: no such node in the input (nodes: h100-node-1, " in result.stderr
    assert "unallocatable" not in result.stderr


def test_allocate_each_and_explain_name_the_same_first_node() -> None:
    fixed = os.path.join(EXAMPLES, "article-fixed")
    allocated = gpudra("allocate", "-f", CLUSTER, "-f", fixed, "--mode", "each", "-o", "yaml")
    assert allocated.returncode == 0, allocated.stderr
    firsts = {}
    for line in allocated.stderr.splitlines():
        if ": allocated on node " in line:
            key, rest = line.split(": allocated on node ", 1)
            firsts[key] = rest.split()[0]
    assert firsts, allocated.stderr
    for key, node in firsts.items():
        namespace, name = key.split("/")
        explained = gpudra("explain", "-f", CLUSTER, "-f", fixed, "-n", namespace, f"claim/{name}", "-o", "json")
        assert json.loads(explained.stdout)["placement"]["node"] == node, key


def _no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def missing() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)


@pytest.mark.parametrize("command", [["discover"], ["driver", "slices", "--node-name", "n"]])
def test_without_nvml_the_default_says_loudly_that_the_gpus_are_simulated(monkeypatch, command) -> None:
    _no_nvml(monkeypatch)
    result = gpudra(*command)
    assert result.returncode == 0, result.stderr
    assert "SIMULATED GPUs" in result.stderr and "--backend simulated" in result.stderr
    explicit = gpudra(*command, "--backend", "simulated")
    assert explicit.returncode == 0 and "SIMULATED" not in explicit.stderr
    profile_named = gpudra(*command, "--profile", "l4-node")  # naming a simulated node asks for one
    assert profile_named.returncode == 0 and "SIMULATED" not in profile_named.stderr
    required = gpudra(*command, "--backend", "nvml")
    assert required.returncode == 2 and required.stderr.startswith("error: ")


def test_driver_run_says_so_too(monkeypatch, tmp_path) -> None:
    _no_nvml(monkeypatch)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    result = gpudra("driver", "run", "--node-name", "n", "--root", str(tmp_path))  # no claim source: stops early
    assert result.returncode == 2
    assert "SIMULATED GPUs" in result.stderr


def test_with_nvml_the_default_reads_the_real_gpus(monkeypatch) -> None:
    from support.fake_libnvml import from_simulated, install

    install(monkeypatch, from_simulated("l4-node"))
    result = gpudra("discover", "-o", "json")
    assert result.returncode == 0, result.stderr
    inventory = json.loads(result.stdout)
    assert inventory["backend"] == "nvml" and len(inventory["gpus"]) == 4
    assert "SIMULATED" not in result.stderr


GENERATORS = [
    *(["driver", "slices", "--backend", "simulated", "--node-name", "node-a", "--profile", profile, *extra]
      for profile in ("dgx-h100", "hgx-a100-mig", "l4-node", "a30-mig")
      for extra in ([], ["--dynamic-mig"], ["--sharing", "consumable"])),
    ["driver", "deviceclasses"],
    ["driver", "deviceclasses", "--driver-name", "gpu.example.com"],
    ["mig", "slices", "--gpu", "h100-80gb", "--count", "2"],
    ["mig", "slices", "--gpu", "a100-80gb", "--node", "worker-7"],
]


@pytest.mark.parametrize("command", GENERATORS, ids=lambda command: " ".join(command))
def test_every_generator_prints_what_gpudra_validate_accepts(command: list[str]) -> None:
    generated = gpudra(*command, "-o", "yaml")
    assert generated.returncode == 0, generated.stderr
    checked = gpudra("validate", "-f", "-", stdin=generated.stdout)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("command, option", [
    (["driver", "slices", "--backend", "simulated", "--node-name", "BAD NODE"], "--node-name"),
    (["driver", "slices", "--backend", "simulated", "--node-name", "n", "--generation", "-1"], "--generation"),
    (["driver", "deviceclasses", "--driver-name", "Bad Name"], "--driver-name"),
    (["mig", "slices", "--gpu", "h100-80gb", "--node", "Node_1"], "--node-name"),  # one option, two spellings
])
def test_generator_options_that_would_give_invalid_objects_are_usage_errors(command, option) -> None:
    result = gpudra(*command)
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"error: Invalid value for '{option}'" in result.stderr
