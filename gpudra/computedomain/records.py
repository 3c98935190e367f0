"""The compute-domain plugin's records in the checkpoint: a channel or daemon device (`DomainDevice`: no GPU, a
domainID, for a channel its IMEX channels). Importing this module registers how they are read back
(`register_device_types`); their JSON is the checkpoint's as it has always been (the GPU keys present, null).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.gpuplugin.records import GpuDevice
from gpudra.kubeletplugin.prepared import (JSON, EntryError, PreparedDevice, is_range, optional_str,
                                           register_device_types)

# A compute-domain record has type channel or daemon, no GPU, a domainID (a UID: it names a directory) and, for a
# channel, imexChannels [first, end): the channel device nodes it injects.
DOMAIN_RECORD_TYPES = ("channel", "daemon")


@dataclass(frozen=True)
class DomainBinding:
    """What a compute-domain channel or daemon device was prepared for."""

    domain_id: str
    allocation_mode: str | None = None  # channel
    imex_channels: tuple[int, int] | None = None  # channel: [first, end)
    clique: str | None = None  # daemon
    domain_name: str | None = None  # daemon
    domain_namespace: str | None = None  # daemon

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"domainID": self.domain_id}
        if self.allocation_mode is not None:
            out["allocationMode"] = self.allocation_mode
        if self.imex_channels is not None:
            out["imexChannels"] = list(self.imex_channels)
        for key, value in (("clique", self.clique), ("domainName", self.domain_name),
                           ("domainNamespace", self.domain_namespace)):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, record: dict[str, JSON], name: str, kind: str) -> DomainBinding:
        from gpudra.api.schema import names

        if record.get("gpuMinor") is not None or record.get("mig") is not None or record.get("slices") is not None:
            raise EntryError(f"device {name}: a {kind} record names a GPU")
        if names.field_problems("domainID", record.get("domainID"), names.kubernetes_uid, 36):
            raise EntryError(f"device {name}: domainID is not a UID")
        channels = record.get("imexChannels")
        if kind == "channel" and not is_range(channels, empty=True):
            raise EntryError(f"device {name}: imexChannels is not [first, end]")
        return cls(domain_id=record["domainID"],
                   allocation_mode=optional_str(record.get("allocationMode"), f"device {name}: allocationMode"),
                   imex_channels=(channels[0], channels[1]) if channels is not None else None,
                   clique=optional_str(record.get("clique"), f"device {name}: clique"),
                   domain_name=optional_str(record.get("domainName"), f"device {name}: domainName"),
                   domain_namespace=optional_str(record.get("domainNamespace"), f"device {name}: domainNamespace"))


@dataclass(frozen=True)
class DomainDevice(GpuDevice):
    """A compute-domain channel or daemon device. It extends the GPU record because the compute-domain plugin runs
    on the GPU plugin's DeviceState, which reads the GPU fields of every record (here all None)."""

    domain: DomainBinding | None = None

    def to_json(self) -> dict[str, JSON]:
        out = super().to_json()
        if self.domain is not None:
            out.update(self.domain.to_json())
        return out

    @classmethod
    def decode(cls, record: dict[str, JSON], name: str, completed: bool) -> DomainDevice:
        domain = DomainBinding.from_json(record, name, record["type"])
        gpu = cls.gpu_fields(record, name, completed)
        return cls(**PreparedDevice.common_fields(record, name), **gpu, domain=domain)


def domain_of(record: GpuDevice) -> DomainBinding | None:
    """What a compute-domain record was prepared for; None for any other record."""
    return record.domain if isinstance(record, DomainDevice) else None


register_device_types(DOMAIN_RECORD_TYPES, DomainDevice.decode)
