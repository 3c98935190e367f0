"""CDI spec model, minimum versions, naming rules, writer and the OCI resolver."""

from __future__ import annotations

import json
import os
import stat

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudra.cdi import (CdiError, ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Registry,
                        Spec, apply_devices, apply_edits, default_oci_spec, load_spec_file, minimum_required_version,
                        parse_qualified_name, render_spec, transient_spec_name, validate_spec, write_spec)


def _spec(**kw) -> Spec:
    devices = kw.pop("devices", [Device("gpu0", ContainerEdits(env=["A=1"]))])
    return Spec(kind=kw.pop("kind", "vendor.com/gpu"), devices=devices, **kw)


def test_round_trip_and_strict_parsing():
    spec = _spec(container_edits=ContainerEdits(
        env=["X=1"], device_nodes=[DeviceNode("/dev/x", host_path="/dev/y", type="c", major=1, minor=3, file_mode=0o666)],
        mounts=[Mount("/h", "/c", ["ro"], type="bind")], hooks=[Hook("createContainer", "/bin/h", ["h", "a"], timeout=5)],
        additional_gids=[44]))
    spec.cdi_version = minimum_required_version(spec)
    again = Spec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    data = spec.to_dict()
    data["devices"][0]["containerEdits"]["surprise"] = 1
    with pytest.raises(CdiError, match="unknown field"):
        Spec.from_dict(data)
    with pytest.raises(CdiError, match="missing required field 'kind'"):
        Spec.from_dict({"cdiVersion": "0.3.0", "devices": []})


@pytest.mark.parametrize("change, version", [
    (lambda s: None, "0.3.0"),
    (lambda s: s.devices[0].container_edits.mounts.append(Mount("/a", "/b", type="tmpfs")), "0.4.0"),
    (lambda s: s.devices[0].container_edits.device_nodes.append(DeviceNode("/dev/a", host_path="/dev/b")), "0.5.0"),
    (lambda s: setattr(s.devices[0], "name", "0gpu"), "0.5.0"),
    (lambda s: s.annotations.update({"a": "b"}), "0.6.0"),
    (lambda s: setattr(s, "kind", "vendor.com/gpu.v2"), "0.6.0"),
    (lambda s: s.container_edits.additional_gids.append(5), "0.7.0"),
    (lambda s: setattr(s.container_edits, "intel_rdt", IntelRdt(clos_id="c")), "0.7.0"),
    (lambda s: s.container_edits.net_devices.append(NetDevice("eth0", "net0")), "1.1.0"),
    (lambda s: setattr(s.container_edits, "intel_rdt", IntelRdt(schemata=["L3:0=f"])), "1.1.0"),
])
def test_minimum_required_version(change, version):
    spec = _spec()
    change(spec)
    assert minimum_required_version(spec) == version
    spec.cdi_version = version
    assert validate_spec(spec) == []
    if version != "0.3.0":
        spec.cdi_version = "0.3.0"
        assert any("too old" in p for p in validate_spec(spec))


def test_validation_problems():
    spec = _spec(devices=[Device("-bad", ContainerEdits(env=["=x"])), Device("ok", ContainerEdits()),
                          Device("ok", ContainerEdits(hooks=[Hook("weird", "/x")]))], kind="1vendor/cls")
    spec.cdi_version = "0.9.9"
    problems = "\n".join(validate_spec(spec))
    for fragment in ("unsupported cdiVersion", "invalid vendor", "invalid device name '-bad'", "empty device edits",
                     "duplicate device name 'ok'", "invalid hook name", "invalid environment variable '=x'"):
        assert fragment in problems
    assert "spec has no devices" in "\n".join(validate_spec(Spec(kind="a.com/b", devices=[], cdi_version="0.3.0")))


_names = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.:-]{0,20}[A-Za-z0-9])?", fullmatch=True)


@given(vendor=st.from_regex(r"[a-z]([a-z0-9.-]{0,10}[a-z0-9])?", fullmatch=True),
       cls=st.from_regex(r"[a-z]([a-z0-9_-]{0,10}[a-z0-9])?", fullmatch=True), name=_names)
def test_qualified_name_round_trip(vendor, cls, name):
    assert parse_qualified_name(f"{vendor}/{cls}={name}") == (vendor, cls, name)


@given(st.text(max_size=30))
def test_qualified_name_parser_never_crashes(text):
    try:
        vendor, cls, name = parse_qualified_name(text)
    except CdiError:
        return
    assert f"{vendor}/{cls}={name}" == text


def test_writer_is_atomic_and_picks_minimum_version(tmp_path):
    spec = _spec(devices=[Device("0abc-gpu-0", ContainerEdits(device_nodes=[DeviceNode("/dev/nvidia0", "/dev/nvidia0")]))],
                 kind="k8s.gpu.nvidia.com/claim")
    name = transient_spec_name("k8s.gpu.nvidia.com", "claim", "ns/uid")
    assert name == "k8s.gpu.nvidia.com-claim_ns_uid"
    path = write_spec(spec, str(tmp_path), name)
    assert os.listdir(tmp_path) == [os.path.basename(path)]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    text = open(path).read()
    assert text.startswith('---\ncdiVersion: "0.5.0"\n')
    assert load_spec_file(path) == spec
    with pytest.raises(CdiError, match="empty device edits"):
        write_spec(_spec(devices=[Device("x", ContainerEdits())]), str(tmp_path), "bad")
    assert not os.path.exists(tmp_path / "bad.yaml") and not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    assert json.loads(render_spec(spec, "json"))["cdiVersion"] == "0.5.0"


def _write(directory, kind, devices, edits=None, name="spec"):
    spec = Spec(kind=kind, devices=devices, container_edits=edits or ContainerEdits())
    return write_spec(spec, str(directory), name)


def test_resolver_applies_edits_like_a_runtime(tmp_path):
    static, dynamic = tmp_path / "etc", tmp_path / "run"
    _write(dynamic, "v.com/gpu", [
        Device("a", ContainerEdits(env=["WHO=a", "PATH=/opt/bin"],
                                   device_nodes=[DeviceNode("/dev/a", type="c", major=10, minor=1, permissions="rw")],
                                   mounts=[Mount("/h/deep", "/x/y/z", ["ro"]), Mount("/h/top", "/x", ["ro"])],
                                   hooks=[Hook("createContainer", "/bin/hook", ["hook", "a"])], additional_gids=[0, 44])),
        Device("b", ContainerEdits(env=["WHO=b"], device_nodes=[DeviceNode("/dev/b", type="c", major=10, minor=2)],
                                   additional_gids=[44, 45]))],
        ContainerEdits(env=["COMMON=1"], device_nodes=[DeviceNode("/dev/ctl", type="c", major=10, minor=0)]))
    oci = apply_devices(default_oci_spec(), ["v.com/gpu=a", "v.com/gpu=b"], [str(static), str(dynamic)])
    env = oci["process"]["env"]
    assert env.count("COMMON=1") == 1 and "WHO=b" in env and "WHO=a" not in env  # later value replaces
    assert "PATH=/opt/bin" in env and len([e for e in env if e.startswith("PATH=")]) == 1
    assert [d["path"] for d in oci["linux"]["devices"]] == ["/dev/ctl", "/dev/a", "/dev/b"]
    rules = oci["linux"]["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}
    assert {"allow": True, "type": "c", "major": 10, "minor": 1, "access": "rw"} in rules
    depth = [len([p for p in m["destination"].split("/") if p]) for m in oci["mounts"]]
    assert depth == sorted(depth)
    assert oci["hooks"]["createContainer"] == [{"path": "/bin/hook", "args": ["hook", "a"]}]
    assert oci["process"]["user"]["additionalGids"] == [44, 45]
    with pytest.raises(CdiError, match="unresolvable CDI devices v.com/gpu=zzz"):
        apply_devices(default_oci_spec(), ["v.com/gpu=zzz"], [str(static), str(dynamic)])


def test_priority_and_conflicts(tmp_path):
    static, dynamic = tmp_path / "etc", tmp_path / "run"
    _write(static, "v.com/gpu", [Device("a", ContainerEdits(env=["FROM=static"]))])
    _write(dynamic, "v.com/gpu", [Device("a", ContainerEdits(env=["FROM=dynamic"]))])
    registry = Registry.load([str(static), str(dynamic)])
    assert "FROM=dynamic" in apply_edits(default_oci_spec(), registry.resolve(["v.com/gpu=a"]))["process"]["env"]
    _write(dynamic, "v.com/gpu", [Device("a", ContainerEdits(env=["FROM=again"]))], name="second")
    registry = Registry.load([str(static), str(dynamic)])
    assert any("conflicting device v.com/gpu=a" in e for e in registry.errors)
    assert "v.com/gpu=a" not in registry.devices


def test_device_node_filled_from_host(tmp_path):
    node = DeviceNode("/dev/null-in-container", host_path="/dev/null")
    oci = apply_edits(default_oci_spec(), ContainerEdits(device_nodes=[node]))
    [dev] = oci["linux"]["devices"]
    st_ = os.stat("/dev/null")
    assert (dev["type"], dev["major"], dev["minor"]) == ("c", os.major(st_.st_rdev), os.minor(st_.st_rdev))
    with pytest.raises(CdiError, match="failed to stat"):
        apply_edits(default_oci_spec(), ContainerEdits(device_nodes=[DeviceNode("/dev/does-not-exist-here")]))
    regular = tmp_path / "file"
    regular.write_text("x")
    with pytest.raises(CdiError, match="not a device node"):
        apply_edits(default_oci_spec(), ContainerEdits(device_nodes=[DeviceNode("/dev/x", host_path=str(regular))]))


_text = st.text(max_size=12)
_edits = st.builds(
    ContainerEdits,
    env=st.lists(_text.map(lambda t: "K=" + t), max_size=3),
    device_nodes=st.lists(st.builds(DeviceNode, path=_text, host_path=_text, type=st.sampled_from(["", "c", "b"]),
                                    major=st.none() | st.integers(0, 4095), minor=st.none() | st.integers(0, 2**20),
                                    permissions=st.sampled_from(["", "rw", "rwm"])), max_size=3),
    mounts=st.lists(st.builds(Mount, host_path=_text, container_path=_text, options=st.lists(_text, max_size=3)),
                    max_size=2),
    hooks=st.lists(st.builds(Hook, hook_name=st.sampled_from(["createContainer", "poststop"]), path=_text,
                             args=st.lists(_text, max_size=3), timeout=st.none() | st.integers(1, 99)), max_size=2),
    additional_gids=st.lists(st.integers(1, 2**31), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(kind=_text, names=st.lists(_text, min_size=1, max_size=3), edits=st.lists(_edits, min_size=1, max_size=3),
       annotations=st.dictionaries(_text, _text, max_size=3), common=_edits)
# found by this test: a key ending in a newline passed the plain-key check (`$` matches before "\n")
@example(kind="a/b", names=["x"], edits=[ContainerEdits(env=["K="])], annotations={"A\n": ""}, common=ContainerEdits())
def test_rendered_yaml_parses_back_to_the_same_spec(kind, names, edits, annotations, common):
    import yaml

    spec = Spec(kind=kind, cdi_version="1.1.0", annotations=annotations, container_edits=common,
                devices=[Device(n, e) for n, e in zip(names, edits)])
    assert yaml.safe_load(render_spec(spec)) == spec.to_dict()


@pytest.mark.parametrize("key", ["A\n", "a\nb", "\n", "key\r", "x: y", "- a", "#c", "yes", "A\x85", "A\u2028"])
def test_written_spec_with_an_awkward_annotation_key_loads_back(tmp_path, key):
    spec = Spec(kind="example.com/gpu", cdi_version="", annotations={key: "v"},
                devices=[Device("d0", ContainerEdits(env=["A=1"]))])
    path = write_spec(spec, str(tmp_path), "example.com-gpu")
    assert load_spec_file(path).annotations == {key: "v"}


# --- `gpudra cdi list` and `gpudra cdi validate`: -o table|wide|yaml|json ---------------------------------------


def _cdi(*args: str):
    from click.testing import CliRunner

    from gpudra.cli import cli

    return CliRunner().invoke(cli, ["cdi", *args])


def test_cdi_list_prints_rows_and_records(tmp_path):
    static, dynamic = tmp_path / "etc", tmp_path / "run"
    first = _write(static, "v.com/gpu", [Device("a", ContainerEdits(device_nodes=[DeviceNode("/dev/a")])),
                                         Device("b", ContainerEdits(env=["B=1"]))],
                   ContainerEdits(env=["COMMON=1"], mounts=[Mount("/h", "/c", ["ro"])]))
    second = _write(dynamic, "v.com/nic", [Device("n0", ContainerEdits(device_nodes=[DeviceNode("/dev/n0"),
                                                                                    DeviceNode("/dev/n0c")]))])
    dirs = ["--spec-dir", str(static), "--spec-dir", str(dynamic)]
    table = _cdi("list", *dirs)
    assert table.exit_code == 0, table.output
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["NAME", "DEVICE-NODES", "SPEC"]
    assert [row.split() for row in rows] == [["v.com/gpu=a", "/dev/a", first], ["v.com/gpu=b", "-", first],
                                             ["v.com/nic=n0", "/dev/n0,/dev/n0c", second]]
    wide = _cdi("list", *dirs, "-o", "wide")
    header, *rows = wide.stdout.splitlines()
    assert header.split() == ["NAME", "CDI-VERSION", "DEVICE-NODES", "ENV", "MOUNTS", "HOOKS", "SPEC"]
    assert rows[1].split() == ["v.com/gpu=b", load_spec_file(first).cdi_version, "-", "2", "1", "0", first]
    as_json = json.loads(_cdi("list", *dirs, "-o", "json").stdout)
    import yaml

    assert yaml.safe_load(_cdi("list", *dirs, "-o", "yaml").stdout) == as_json
    assert [d["name"] for d in as_json] == ["v.com/gpu=a", "v.com/gpu=b", "v.com/nic=n0"]
    assert as_json[0] == {"name": "v.com/gpu=a", "kind": "v.com/gpu", "device": "a", "specFile": first,
                          "cdiVersion": load_spec_file(first).cdi_version,
                          "containerEdits": {"deviceNodes": [{"path": "/dev/a"}]},
                          "specContainerEdits": {"env": ["COMMON=1"], "mounts": [Mount("/h", "/c", ["ro"]).to_dict()]}}
    assert "specContainerEdits" not in as_json[2]
    empty = _cdi("list", "--spec-dir", str(tmp_path / "none"), "-o", "json")
    assert empty.exit_code == 0 and json.loads(empty.stdout) == []


def test_cdi_validate_prints_its_problems_as_gpudra_validate_does(tmp_path):
    good = _write(tmp_path, "v.com/gpu", [Device("a", ContainerEdits(env=["A=1"]))])
    bad = tmp_path / "bad.yaml"
    bad.write_text("cdiVersion: 0.3.0\nkind: v.com/x\ndevices: [{name: '-x', containerEdits: {}}]\n")
    ok = _cdi("validate", good)
    assert ok.exit_code == 0 and ok.stdout == ""
    assert ok.stderr.splitlines()[-1] == "1 CDI spec is valid"
    table = _cdi("validate", good, str(bad))
    assert table.exit_code == 1
    lines = table.stdout.splitlines()
    assert lines and all(line.startswith(f"error: {bad}: ") for line in lines), table.stdout
    assert any("invalid device name" in line for line in lines)
    assert table.stderr.splitlines()[-1] == f"2 CDI specs: {len(lines)} error{'s' if len(lines) > 1 else ''}, 0 warnings"
    assert _cdi("validate", good, str(bad), "-o", "wide").stdout == table.stdout
    records = json.loads(_cdi("validate", good, str(bad), "-o", "json").stdout)
    import yaml

    assert yaml.safe_load(_cdi("validate", good, str(bad), "-o", "yaml").stdout) == records
    assert len(records) == len(lines) and {r["source"] for r in records} == {str(bad)}
    assert all(r["severity"] == "error" and r["doc"] is None for r in records)
    assert json.loads(_cdi("validate", good, "-o", "json").stdout) == []


def test_cdi_apply_prints_the_oci_spec_as_json_or_yaml(tmp_path):
    _write(tmp_path, "v.com/gpu", [Device("a", ContainerEdits(env=["WHO=a"], device_nodes=[DeviceNode("/dev/null")]))])
    args = ["apply", "--spec-dir", str(tmp_path), "v.com/gpu=a"]
    default, as_json, as_yaml = _cdi(*args), _cdi(*args, "-o", "json"), _cdi(*args, "-o", "yaml")
    assert default.exit_code == as_json.exit_code == as_yaml.exit_code == 0, default.output
    oci = json.loads(default.stdout)  # config.json's format unless asked otherwise
    assert json.loads(as_json.stdout) == oci
    import yaml

    assert yaml.safe_load(as_yaml.stdout) == oci and "WHO=a" in oci["process"]["env"]
