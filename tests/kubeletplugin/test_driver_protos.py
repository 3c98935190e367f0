"""The checked-in gRPC code is what grpcio-tools generates from the .proto files, and the wire names are upstream's."""

from __future__ import annotations

import os
import re

from gpudra.kubeletplugin.protos import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_pb2
from gpudra.kubeletplugin.protos.generate import HERE, PROTOS, REL_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The lines where the generator writes its own version (gRPC's stamp; protoc's header and runtime check): a patch
# release of grpcio-tools changes them and nothing else, so the comparison with a fresh generation leaves them out.
# What they must say is checked on its own, against the project's pins (test below).
_VERSION_LINES = re.compile(
    r"^(GRPC_GENERATED_VERSION = ).*$|^(# Protobuf Python Version: ).*$"
    r"|(_runtime_version\.Domain\.PUBLIC,\n)\s*\d+,\n\s*\d+,\n\s*\d+,\n", re.MULTILINE)


def _without_generator_versions(text: str) -> str:
    return _VERSION_LINES.sub(lambda m: next(g for g in m.groups() if g is not None) + "<version>", text)


def _pinned(name: str) -> str:
    with open(os.path.join(ROOT, "test-constraints.txt"), encoding="utf-8") as f:
        for line in f:
            if line.lower().startswith(name + "=="):
                return line.split("==", 1)[1].strip()
    raise AssertionError(f"test-constraints.txt pins no {name}")


def _floor(name: str) -> str:
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return next(re.fullmatch(rf"{name}>=([0-9.]+).*", d).group(1) for d in deps if re.fullmatch(rf"{name}>=.*", d))


def _checked_in(name: str) -> str:
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return f.read()


def test_generated_code_is_up_to_date(tmp_path):
    from gpudra.kubeletplugin.protos.generate import generate

    written = generate(str(tmp_path))
    assert len(written) == 3 * len(PROTOS)
    for path in written:
        with open(path, encoding="utf-8") as fresh:
            generated = fresh.read()
        ours = _checked_in(os.path.basename(path))
        assert _without_generator_versions(generated) == _without_generator_versions(ours), (
            f"{path} is stale: run python -m gpudra.kubeletplugin.protos.generate")
        assert "<version>" in _without_generator_versions(generated) or path.endswith(".pyi")
    assert REL_DIR == os.path.join("gpudra", "kubeletplugin", "protos")


def test_descriptors_equal_what_the_protos_compile_to(tmp_path):
    # the wire contract itself, independent of how the generator prints it: protoc's FileDescriptorSet of our .proto
    # files against the descriptors the checked-in modules register
    from google.protobuf import descriptor_pb2
    import importlib

    from grpc_tools import protoc

    from gpudra.kubeletplugin.protos.generate import PACKAGE_ROOT

    out = tmp_path / "set.pb"
    args = ["protoc", f"-I{PACKAGE_ROOT}", f"--descriptor_set_out={out}"] + [os.path.join(REL_DIR, p) for p in PROTOS]
    assert protoc.main(args) == 0
    compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    assert len(compiled.file) == len(PROTOS)
    for fd in compiled.file:
        _clear_json_names(fd.message_type)  # the Python generator leaves out what is derived from the field name
        module = importlib.import_module("gpudra.kubeletplugin.protos." + os.path.basename(fd.name)[:-len(".proto")] + "_pb2")
        assert descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb) == fd, fd.name


def _clear_json_names(messages) -> None:
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _clear_json_names(message.nested_type)


def test_generated_code_names_the_pinned_generator_and_the_runtime_floors():
    # grpcio-tools stamps its version as the oldest grpcio the stubs import with, and protoc its own as the oldest
    # protobuf runtime: both must be the floors users get from pyproject.toml, and the generator the one the test
    # environment pins (tools/refresh_pins.py holds it there)
    assert _pinned("grpcio-tools") == _floor("grpcio")
    for proto in PROTOS:
        stem = proto[:-len(".proto")]
        stamp = re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'$", _checked_in(stem + "_pb2_grpc.py"), re.MULTILINE)
        assert stamp and stamp.group(1) == _floor("grpcio"), stem
        header = re.search(r"^# Protobuf Python Version: (\S+)$", _checked_in(stem + "_pb2.py"), re.MULTILINE)
        assert header and header.group(1) == _floor("protobuf"), stem


def test_service_and_message_names_match_the_kubelet():
    v1 = dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert v1.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert [m.name for m in v1.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    assert dra_v1beta1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == (
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin")
    reg = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert reg.full_name == "pluginregistration.Registration"
    device = dra_v1_pb2.Device.DESCRIPTOR
    assert [(f.name, f.number) for f in device.fields] == [
        ("request_names", 1), ("pool_name", 2), ("device_name", 3), ("cdi_device_ids", 4), ("share_id", 5)]
    assert "share_id" not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name
    claim = dra_v1_pb2.Claim.DESCRIPTOR
    assert [(f.name, f.number) for f in claim.fields] == [("namespace", 1), ("uid", 2), ("name", 3)]
    info = pluginregistration_pb2.PluginInfo.DESCRIPTOR
    assert [(f.name, f.number) for f in info.fields] == [
        ("type", 1), ("name", 2), ("endpoint", 3), ("supported_versions", 4)]


def test_wire_compatibility_between_versions():
    # a v1 message without share_id decodes as v1beta1 and back, field for field
    msg = dra_v1_pb2.NodePrepareResourcesResponse()
    dev = msg.claims["uid-1"].devices.add(request_names=["gpu"], pool_name="n", device_name="gpu-0",
                                          cdi_device_ids=["k8s.gpu.nvidia.com/claim=uid-1-gpu-0"])
    beta = dra_v1beta1_pb2.NodePrepareResourcesResponse.FromString(msg.SerializeToString())
    assert beta.claims["uid-1"].devices[0].device_name == dev.device_name
    assert not msg.claims["uid-1"].devices[0].HasField("share_id")
