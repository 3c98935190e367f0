"""The checked-in gRPC code is what grpcio-tools generates from the .proto files, and the wire names are upstream's."""

from __future__ import annotations

import os


from gpudra.driver.protos import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_pb2
from gpudra.driver.protos.generate import HERE, PROTOS, REL_DIR


def test_generated_code_is_up_to_date(tmp_path):
    from gpudra.driver.protos.generate import generate

    written = generate(str(tmp_path))
    assert len(written) == 3 * len(PROTOS)
    for path in written:
        checked_in = os.path.join(HERE, os.path.basename(path))
        with open(path, encoding="utf-8") as fresh, open(checked_in, encoding="utf-8") as ours:
            assert fresh.read() == ours.read(), f"{checked_in} is stale: run python -m gpudra.driver.protos.generate"
    assert REL_DIR == os.path.join("gpudra", "driver", "protos")


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
