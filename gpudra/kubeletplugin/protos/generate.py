"""Regenerate the checked-in gRPC code from the .proto files next to this module.

    python -m gpudra.kubeletplugin.protos.generate [OUTPUT_ROOT]

Protos are compiled with the repository root as include path, so the generated modules
import each other as `gpudra.kubeletplugin.protos.<name>_pb2` and land in our package.
Needs grpcio-tools (a test/dev dependency only), the version test-constraints.txt pins: the grpcio floor of
pyproject.toml, since the generator stamps its own version into the stubs as the oldest grpcio they import with
(`pip install -c test-constraints.txt grpcio-tools`; tests/kubeletplugin/test_driver_protos.py checks stamp == floor == pin).
"""

from __future__ import annotations

import os
import sys

PROTOS = ("dra_v1.proto", "dra_v1beta1.proto", "pluginregistration.proto", "dra_health_v1alpha1.proto", "dra_health_v1.proto")
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # directory holding `gpudra/`
REL_DIR = os.path.relpath(HERE, PACKAGE_ROOT)


def generate(output_root: str = PACKAGE_ROOT) -> list[str]:
    from grpc_tools import protoc

    import grpc_tools

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    os.makedirs(os.path.join(output_root, REL_DIR), exist_ok=True)
    written = []
    for proto in PROTOS:
        rel = os.path.join(REL_DIR, proto)
        args = ["protoc", f"-I{PACKAGE_ROOT}", f"-I{include}", f"--python_out={output_root}",
                f"--pyi_out={output_root}", f"--grpc_python_out={output_root}", rel]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed for {rel}")
        stem = os.path.join(output_root, REL_DIR, proto[:-len(".proto")])
        written += [stem + "_pb2.py", stem + "_pb2.pyi", stem + "_pb2_grpc.py"]
    return written


if __name__ == "__main__":
    for path in generate(sys.argv[1] if len(sys.argv) > 1 else PACKAGE_ROOT):
        print(path)
