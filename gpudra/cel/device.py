"""The `device` variable of a selector, prepared once per device and reused by every evaluation."""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from collections.abc import Hashable

from gpudra.quantity import Quantity, QuantityError
from gpudra.semver import SemverError, parse_semver
from gpudra.cel import values as V
from gpudra.cel.source import ATTRIBUTES_VARIABLE, CAPACITY_VARIABLE, NO_ATTRIBUTES_VARIABLE, NO_CAPACITY_VARIABLE

_SCALAR_KINDS = ("int", "bool", "string", "version")
_LIST_KINDS = ("ints", "bools", "strings", "versions")


class DeviceInput:
    """A device converted for CEL: attributes and capacity split into domains, versions and quantities
    turned into their CEL types. `error` is set when the device cannot be presented to CEL at all
    (Kubernetes then fails every selector on it with that message)."""

    __slots__ = ("driver", "name", "data", "error", "results", "_activation")

    def __init__(self, driver: str, name: str, data: dict[str, Any], error: str | None):
        self.driver = driver
        self.name = name
        self.data = data
        self.error = error
        # Selector.evaluate remembers its outcome per device: a selector's result on a device never
        # changes, schedulers ask the same question many times, and an evaluation that calls into
        # Python costs far more than a lookup.
        self.results: dict[tuple[str, tuple[object, ...], bool], bool | str] = {}  # Selector._key -> outcome
        self._activation = None

    @property
    def device(self) -> dict[str, Any]:
        device: dict[str, Any] = self.data["device"]  # set by device_input
        return device

    def activation(self, env: Any) -> Any:
        # A pre-built Activation is about twice as fast to evaluate as a fresh dict.
        if self._activation is None:
            self._activation = env.Activation(self.data)
        return self._activation

    def __repr__(self) -> str:
        return f"DeviceInput(driver={self.driver!r}, name={self.name!r}, error={self.error!r})"


def split_qualified_name(driver: str, name: str) -> tuple[str, str]:
    """`d/x` is (d, x); a bare name belongs to the driver's own domain."""
    domain, slash, identifier = name.partition("/")
    if not slash:
        return driver, name
    return domain, identifier


def _version(name: str, text: Any) -> Any:
    try:
        return _runtime_semver(text) if isinstance(text, str) else V.runtime_semver(parse_semver(text))
    except SemverError as error:
        raise ValueError(f"attribute {name}: parse semantic version: {error}") from None


@lru_cache(maxsize=4096)  # a fleet has few driver and CUDA versions, on thousands of devices
def _runtime_semver(text: str) -> str:
    return V.runtime_semver(parse_semver(text))


def _attribute_value(name: str, attribute: Any, list_type_attributes: bool) -> Any:
    if isinstance(attribute, dict):
        for kind in _SCALAR_KINDS:
            value = attribute.get(kind)
            if value is not None:
                return _version(name, value) if kind == "version" else value
        for kind in _LIST_KINDS if list_type_attributes else ():
            values = attribute.get(kind)
            if values is not None:
                if kind == "versions":
                    return [_version(name, value) for value in values]
                return list(values)
    raise ValueError(f"attribute {name}: unsupported attribute value")


def _capacity_value(name: str, capacity: Any) -> Any:
    value: Any = capacity.get("value") if isinstance(capacity, dict) else capacity
    try:
        return V.parse_runtime_quantity(value) if isinstance(value, str) else V.runtime_quantity(Quantity.parse(value))
    except QuantityError as error:
        raise ValueError(f"capacity {name}: {error}") from None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _converted(driver: str, device: dict[str, Any], list_type_attributes: bool) -> Any:
    """(attributes, capacity, error) as CEL sees them."""
    attributes: dict[str, dict[str, Any]] = {}
    capacity: dict[str, dict[str, Any]] = {}
    error: str | None = None
    for name, attribute in _mapping(device.get("attributes")).items():
        domain, identifier = split_qualified_name(driver, str(name))
        try:
            attributes.setdefault(domain, {})[identifier] = _attribute_value(str(name), attribute, list_type_attributes)
        except ValueError as problem:
            error = error or str(problem)
    for name, entry in _mapping(device.get("capacity")).items():
        domain, identifier = split_qualified_name(driver, str(name))
        try:
            capacity.setdefault(domain, {})[identifier] = _capacity_value(str(name), entry)
        except ValueError as problem:
            error = error or str(problem)
    return attributes, capacity, error


def device_input(driver: str, device: dict[str, Any], *, list_type_attributes: bool = False) -> DeviceInput:
    """Convert one entry of a ResourceSlice's `spec.devices` (v1 layout). Never raises.

    `list_type_attributes` is the DRAListTypeAttributes feature gate (alpha in 1.36, off by default):
    without it an attribute holding `ints`/`bools`/`strings`/`versions` has no value CEL can see,
    so every selector on the device fails with "attribute X: unsupported attribute value".
    """
    device = device if isinstance(device, dict) else {}
    attributes, capacity, error = _converted(driver, device, list_type_attributes)
    data = {
        "device": {
            "driver": driver,
            "attributes": attributes,
            "capacity": capacity,
            "allowMultipleAllocations": bool(device.get("allowMultipleAllocations") or False),
        },
        # the variables that source.rewrite_domain_lookups puts in place of device.attributes/capacity
        ATTRIBUTES_VARIABLE: attributes,
        CAPACITY_VARIABLE: capacity,
        NO_ATTRIBUTES_VARIABLE: {},
        NO_CAPACITY_VARIABLE: {},
    }
    return DeviceInput(driver, str(device.get("name", "")), data, error)


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a JSON value that tells apart what CEL tells apart (1, 1.0 and true too)."""
    if isinstance(value, dict):
        return ("map", tuple((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("list", tuple(_frozen(item) for item in value))
    hash(value)  # TypeError for anything a JSON document cannot hold
    return (type(value), value)


@lru_cache(maxsize=4096)
def _version_converts(text: str) -> bool:
    try:
        _runtime_semver(text)
    except SemverError:
        return False
    return True


def input_facts(driver: str, device: Any, *, list_type_attributes: bool = False) -> tuple[str | None, bool]:
    """(device_input(…).error, whether every attribute and capacity name is a string), without building the
    input: a big cluster asks this of each of its thousands of devices, so the shapes that never fail are
    passed over first."""
    device = device if isinstance(device, dict) else {}
    plain_names = True
    for name, attribute in _mapping(device.get("attributes")).items():
        if type(name) is not str:
            plain_names = False
        if type(attribute) is dict:
            # _attribute_value takes the first of int, bool, string, version that is set
            if attribute.get("string") is not None or attribute.get("int") is not None or (
                attribute.get("bool") is not None
            ):
                continue
            version = attribute.get("version")
            if type(version) is str and _version_converts(version):
                continue
        try:
            _attribute_value(str(name), attribute, list_type_attributes)
        except ValueError as problem:
            return str(problem), plain_names  # the first error is the device's, whatever follows
    for name, entry in _mapping(device.get("capacity")).items():
        if type(name) is not str:
            plain_names = False
        try:
            _capacity_value(str(name), entry)
        except ValueError as problem:
            return str(problem), plain_names
    return None, plain_names


@lru_cache(maxsize=1024)
def _read_names(driver: str, reads: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, Any], ...]:
    """Per read: ("device", field), or (map, the raw names device_input puts in that place)."""
    found: list[tuple[str, Any]] = []
    for read in reads:
        if read[0] == "device":
            found.append((read[0], read[1]))  # ("device", field): reads.py makes them pairs
            continue
        domain, identifier = read[1], read[2]
        bare = (identifier,) if domain == driver and "/" not in identifier else ()
        found.append((read[0], (f"{domain}/{identifier}", *bare)))
    return tuple(found)


def device_projection(driver: str, device: Any, reads: tuple[tuple[str, ...], ...],
                      plain_names: bool = False) -> tuple[Hashable, ...] | None:
    """What a selector with these reads (gpudra.cel.reads) sees of the device, as a hashable key, or None when
    the device's data cannot be keyed. Two devices without conversion error (input_facts) and with equal keys give
    the selector the same outcome. `plain_names`: input_facts found every name a string (then names are looked up,
    not searched for).

    Per read, the key holds the raw entries that device_input would put in that place, in their order (so that
    the last of duplicates wins alike)."""
    device = device if isinstance(device, dict) else {}
    key: list[Any] = []
    try:
        for place, names in _read_names(driver, reads):
            if place == "device":
                key.append(driver if names == "driver" else bool(device.get("allowMultipleAllocations") or False))
                continue
            entries = _mapping(device.get(place))
            if plain_names:
                found = [name for name in names if name in entries]
                if len(found) > 1:
                    found.sort(key=list(entries).index)
                key.append(tuple((name, _frozen(entries[name])) for name in found))
            else:
                key.append(tuple((name, _frozen(entry)) for name, entry in entries.items() if str(name) in names))
    except TypeError:
        return None
    return tuple(key)
