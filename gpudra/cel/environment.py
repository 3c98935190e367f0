"""The DRA CEL environments on cel-expr-python (cel-cpp).

Two environments share every library:
- the *checking* environment declares `device` as the message `kubernetes.DRADevice` (or the variant
  without `allowMultipleAllocations` when DRAConsumableCapacity is off), so the type checker rejects
  unknown fields, wrong result types and misuse of quantities the way Kubernetes does
  (`device.attributes`/`device.capacity` are rewritten to typed variables, see source.py);
- the *runtime* environment declares `device` as `map(string, dyn)` so an evaluation binds a plain
  Python dict prepared once per device (cel-cpp checks a message-typed variable's runtime value).

Which libraries and DRA features a release's reading offers: gpudra.cel.release. Libraries (all of them): standard CEL with cross-type numeric ordering,
optional types, cel.bind, ext strings, ext lists, ext sets, two-variable comprehensions — all from
cel-cpp itself, enabled through its environment config — plus Quantity, Semver, Kubernetes lists,
regex find/findAll, `includes`, URL, IP, CIDR and format in Python (library_k8s.py, library_net.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import any_pb2  # noqa: F401 - registers google.protobuf.Any in the default pool

from gpudra.cel import library_format, library_guards, library_k8s, library_net, list_cost, source
from gpudra.cel import values as V
from gpudra.cel.release import CelEnvironment

_CONFIG_YAML = """
extensions:
  - name: two-var-comprehensions
  - name: sets
{lists}stdlib:
  exclude_functions:
    - name: _<_
    - name: _<=_
    - name: _>_
    - name: _>=_
"""


def _extensions(runtime: bool, features: CelEnvironment) -> list[Any]:
    return [
        ext_strings.ExtStrings(),
        ext_optional.ExtOptional(),
        ext_bindings.ExtBindings(),
        # A CelExtension merges overloads into functions that already exist (a plain FunctionDecl
        # for indexOf would collide with the strings extension's indexOf), and Python functions
        # with `dyn` parameters only dispatch correctly when registered through an extension.
        cel.CelExtension(
            "kubernetes",
            library_k8s.list_index_declarations()
            + library_k8s.declarations(runtime, features)
            + library_net.declarations(runtime)
            + (library_guards.declarations() + list_cost.declarations() if runtime else [])
            + library_format.declarations(),
        ),
    ]


# Kubernetes types attribute values `any` unless DRAListTypeAttributes is on (then `dyn`, so that list
# attributes can be iterated); cel-cpp's checker treats google.protobuf.Any as cel-go's does: assignable
# anywhere, but not the range of a comprehension.
ANY_TYPE = cel.Type("google.protobuf.Any")


def _new_env(device_type: cel.Type, runtime: bool, features: CelEnvironment, extra: tuple[str, ...] = (),
             typed: tuple[tuple[str, cel.Type], ...] = ()) -> cel.Env:
    # At runtime quantities are tagged strings (values.py), for the checker they are messages.
    capacity_domain = cel.Type.Map(cel.Type.STRING, cel.Type.STRING if runtime else cel.Type(V.QUANTITY_TYPE))
    attribute_domain = cel.Type.Map(cel.Type.STRING, cel.Type.DYN if features.list_attributes else ANY_TYPE)
    config = _CONFIG_YAML.format(lists="  - name: lists\n" if features.ext_lists else "")
    return cel.NewEnv(
        descriptor_pool=V.POOL,
        config=cel.NewEnvConfigFromYaml(config),
        variables={
            "device": device_type,
            source.ATTRIBUTES_VARIABLE: cel.Type.Map(cel.Type.STRING, attribute_domain),
            source.CAPACITY_VARIABLE: cel.Type.Map(cel.Type.STRING, capacity_domain),
            source.NO_ATTRIBUTES_VARIABLE: attribute_domain,
            source.NO_CAPACITY_VARIABLE: capacity_domain,
            **{name: cel.Type.DYN for name in extra},
            **dict(typed),
        },
        extensions=_extensions(runtime, features),
        functions=library_k8s.comparison_declarations() + library_k8s.ordering_declarations(runtime),
    )


@lru_cache(maxsize=32)
def checking_env(features: CelEnvironment = CelEnvironment()) -> cel.Env:
    """The type-checking environment of one release's reading (gpudra.cel.release)."""
    device = V.DEVICE_TYPE if features.multiple_allocations else V.DEVICE_TYPE_NO_MULTI
    return _new_env(cel.Type(device), runtime=False, features=features)


def checking_env_with(features: CelEnvironment, variables: tuple[tuple[str, cel.Type], ...]) -> cel.Env:
    """The checking environment plus typed variables (the bindings of a long chain, gpudra.cel.bind_chain)."""
    device = V.DEVICE_TYPE if features.multiple_allocations else V.DEVICE_TYPE_NO_MULTI
    return _new_env(cel.Type(device), runtime=False, features=features, typed=variables)


@lru_cache(maxsize=1)
def runtime_env() -> cel.Env:
    """One evaluation environment for every release: the checking environment has refused what a release lacks."""
    return _new_env(cel.Type.Map(cel.Type.STRING, cel.Type.DYN), runtime=True, features=CelEnvironment())


@lru_cache(maxsize=16)
def runtime_env_with(*variables: str) -> cel.Env:
    """The evaluation environment plus `dyn` variables (macros' iteration variables, gpudra.cel.chunked)."""
    return _new_env(cel.Type.Map(cel.Type.STRING, cel.Type.DYN), runtime=True, features=CelEnvironment(),
                    extra=tuple(variables))
