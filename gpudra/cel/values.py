"""CEL value types that cel-expr-python cannot carry natively, built as protobuf messages at runtime.

cel-expr-python (cel-cpp) has no opaque Python values: a runtime value is a primitive, a list, a map
or a protobuf message. Kubernetes' Quantity, Semver, URL, IP and CIDR are therefore one-field
messages whose single field holds a *canonical* text, so that message equality (which compares
fields) is the semantic equality Kubernetes defines (`quantity("1Gi") == quantity("1024Mi")`).
Quantity and Semver are messages only for the type checker: while evaluating they are tagged
strings (see "runtime form" below), which are cheaper to pass to Python.

The device variable is described twice: `kubernetes.DRADevice` (a message, so the type checker knows
`device.driver` is a string and rejects `device.nosuchfield`) is used only for checking; evaluation
binds `device` to a plain map with the same keys (see environment.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import struct_pb2  # noqa: F401 - registers google.protobuf.Struct in the default pool

from gpudra.quantity import Int64Amount, Quantity
from gpudra.semver import Semver, parse_semver

_Field = descriptor_pb2.FieldDescriptorProto

QUANTITY_TYPE = "kubernetes.Quantity"
SEMVER_TYPE = "kubernetes.Semver"
URL_TYPE = "kubernetes.URL"
IP_TYPE = "net.IP"
CIDR_TYPE = "net.CIDR"
FORMAT_TYPE = "kubernetes.NamedFormat"
DEVICE_TYPE = "kubernetes.DRADevice"
DEVICE_TYPE_NO_MULTI = "kubernetes.DRADeviceWithoutMultipleAllocations"


def _add_text_message(file: descriptor_pb2.FileDescriptorProto, name: str) -> None:
    file.message_type.add(name=name).field.add(name="s", number=1, type=_Field.TYPE_STRING, label=_Field.LABEL_OPTIONAL)


def _add_device_message(file: descriptor_pb2.FileDescriptorProto, name: str, with_multiple_allocations: bool) -> None:
    device = file.message_type.add(name=name)
    device.field.add(name="driver", number=1, type=_Field.TYPE_STRING, label=_Field.LABEL_OPTIONAL)
    for number, field_name in ((2, "attributes"), (3, "capacity")):
        entry_name = field_name.capitalize() + "Entry"
        entry = device.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=_Field.TYPE_STRING, label=_Field.LABEL_OPTIONAL)
        # google.protobuf.Struct is CEL's map(string, dyn): the checker then types
        # device.attributes["d"] as map(string, dyn), as Kubernetes does.
        entry.field.add(
            name="value", number=2, type=_Field.TYPE_MESSAGE, type_name=".google.protobuf.Struct", label=_Field.LABEL_OPTIONAL
        )
        device.field.add(
            name=field_name,
            number=number,
            type=_Field.TYPE_MESSAGE,
            type_name=f".kubernetes.{name}.{entry_name}",
            label=_Field.LABEL_REPEATED,
        )
    if with_multiple_allocations:
        device.field.add(name="allowMultipleAllocations", number=4, type=_Field.TYPE_BOOL, label=_Field.LABEL_OPTIONAL)


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.Default()
    try:
        pool.FindMessageTypeByName(DEVICE_TYPE)
        return pool  # already registered (module reloaded in tests)
    except KeyError:
        pass
    kubernetes = descriptor_pb2.FileDescriptorProto(
        name="gpudra/cel/kubernetes.proto", package="kubernetes", syntax="proto3", dependency=["google/protobuf/struct.proto"]
    )
    for name in ("Quantity", "Semver", "URL", "NamedFormat"):
        _add_text_message(kubernetes, name)
    _add_device_message(kubernetes, "DRADevice", True)
    _add_device_message(kubernetes, "DRADeviceWithoutMultipleAllocations", False)
    net = descriptor_pb2.FileDescriptorProto(name="gpudra/cel/net.proto", package="net", syntax="proto3")
    for name in ("IP", "CIDR"):
        _add_text_message(net, name)
    pool.Add(kubernetes)
    pool.Add(net)
    return pool


POOL = _build_pool()


def _message_class(full_name: str) -> Any:
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


QuantityMessage = _message_class(QUANTITY_TYPE)
SemverMessage = _message_class(SEMVER_TYPE)
URLMessage = _message_class(URL_TYPE)
IPMessage = _message_class(IP_TYPE)
CIDRMessage = _message_class(CIDR_TYPE)
FormatMessage = _message_class(FORMAT_TYPE)


# ----- Quantity: the exact value in nano-units, then Kubernetes' internal form ----------------------
# "<nanos>" where Kubernetes holds an inf.Dec, "<nanos>:<value>e<scale>" where it holds an int64Amount
# (gpudra.quantity.Int64Amount): isInteger/asInteger answer from the form, so "1000m" and "1" differ in
# text though equal in value; every comparison of two quantities goes through Quantity.cmp (guards.py).
_FORM_MARK = ":"


def quantity_text(quantity: Quantity) -> str:
    amount = quantity.int64_amount()
    if amount is None:
        return str(quantity.nanos)
    return f"{quantity.nanos}{_FORM_MARK}{amount.value}e{amount.scale}"


def quantity_message(quantity: Quantity) -> Any:
    return QuantityMessage(s=quantity_text(quantity))


@lru_cache(maxsize=4096)
def _quantity_from_text(text: str) -> Quantity:
    nanos, mark, form = text.partition(_FORM_MARK)
    if not mark:
        return Quantity(int(nanos), form=None)
    value, _, scale = form.partition("e")
    return Quantity(int(nanos), form=Int64Amount(int(value), int(scale)))


def quantity_of(value: Any) -> Quantity:
    """The Quantity of a runtime value (tagged string) or of a message."""
    if isinstance(value, str):
        if not value.startswith(QUANTITY_TAG):
            raise ValueError("no such overload")
        return _quantity_from_text(value[len(QUANTITY_TAG):].lstrip(POINTER_MARK))
    return _quantity_from_text(value.s)


# ----- Semver: canonical text without build metadata (which never takes part in comparisons) ------
def semver_message(version: Semver) -> Any:
    canonical = Semver(version.major, version.minor, version.patch, version.prerelease)
    return SemverMessage(s=str(canonical))


@lru_cache(maxsize=4096)
def semver_of_text(text: str) -> Semver:
    return parse_semver(text)


def semver_of(value: Any) -> Semver:
    """The Semver of a runtime value (tagged string) or of a message."""
    if isinstance(value, str):
        if not value.startswith(SEMVER_TAG):
            raise ValueError("no such overload")
        return semver_of_text(value[len(SEMVER_TAG):])
    return semver_of_text(value.s)


# ----- runtime form -----------------------------------------------------------------------------------
# At evaluation time quantities and versions are strings: a tag led by the unit-separator control
# character (NUL would be cut off by the binding) plus the canonical text.
# cel-expr-python converts a message argument of a Python function into a new protobuf object on
# every call (about 10 µs) and never frees it (about 1 KiB); a string costs a fraction of both.
# Only the checking environment sees the message types, so typing is unaffected; equality of the
# canonical strings is semantic equality for versions (quantities also carry their internal form, so
# guards.py sends their comparisons to Quantity.cmp), and the tag keeps them apart from ordinary strings.
QUANTITY_TAG = "\x1fquantity:"
SEMVER_TAG = "\x1fsemver:"


# Kubernetes' quantity add/sub return a *pointer* to a Quantity (k8s.io/apiserver pkg/cel/library/quantity.go),
# and Quantity.Equal accepts only a value: `quantity("2") == quantity("1").add(1)` is "no such overload" there
# (the pointer on the left is fine). Arithmetic results carry this mark after the tag.
POINTER_MARK = "*"


def runtime_quantity(quantity: Quantity, pointer: bool = False) -> str:
    return QUANTITY_TAG + (POINTER_MARK if pointer else "") + quantity_text(quantity)


def is_quantity_pointer(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(QUANTITY_TAG + POINTER_MARK)


def runtime_semver(version: Semver) -> str:
    text: str = semver_message(version).s
    return SEMVER_TAG + text


@lru_cache(maxsize=4096)
def parse_runtime_quantity(text: str) -> str:
    """quantity(text) in runtime form; raises QuantityError."""
    return runtime_quantity(Quantity.parse(text))


def is_runtime_quantity(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(QUANTITY_TAG)


def is_runtime_semver(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(SEMVER_TAG)
