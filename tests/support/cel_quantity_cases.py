"""The cases of tests/oracles/test_cel_quantity_oracle.py, generated from a fixed seed: quantity and semver
expressions whose expected answers come from tests/support/quantity_semver_reference.py (class `reference`), and
isInteger/asInteger expressions only cel-go can answer (class `int64-form`), with hand-written ones on the internal
form's edges (FORM_CASES: int64 overflow in add/sub, the fast path's digit limits, equal quantities of different forms
in lists, maps and `in`, capacities read from a ResourceSlice) and two where Kubernetes mutates a shared Quantity in
place (class `in-place`, which gpudra does not copy).

    PYTHONPATH=tests python -m support.cel_quantity_cases > tests/data/conformance/cel-oracle-quantity/cases.json
"""

from __future__ import annotations

import json
import random

from support import quantity_semver_reference as reference

SEED, PAIRS, VERSION_PAIRS = 31, 120, 80

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E-2", "e-12",
            "e+20"]
EDGE_QUANTITIES = ["0", "-0", "0.0", "1000m", "1.0", "5.", "+.5", "1e3", "100E-2", "12.000k", "1Ki", "1.5Ki", "0.5Ki",
                   "1000000Ti", "8Ei", "9Ei", "1n", "0.1n", "-0.1n", "9223372036854775807", "9223372036854775808",
                   "-9223372036854775808", "1024", "1.5"]
SEMVER_ORG_ORDER = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
                    "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "2.0.0", "2.1.0", "2.1.1"]  # semver.org §11 examples


def _quantity(rng: random.Random) -> str:
    whole = rng.choice(["", "0", str(rng.randint(0, 9)), str(rng.randint(0, 999)), str(rng.randint(0, 10**6))])
    fraction = rng.choice(["", "", ".", "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 4)))])
    if not whole and fraction in ("", "."):
        whole = "1"
    return f"{rng.choice(['', '-', '+'])}{whole}{fraction}{rng.choice(SUFFIXES)}"


def _version(rng: random.Random) -> reference.Version:
    def identifier() -> int | str:
        return rng.randint(0, 30) if rng.random() < 0.5 else "".join(rng.choice("abcxyz-") for _ in range(rng.randint(1, 4)))

    prerelease = tuple(identifier() for _ in range(rng.choice([0, 0, 1, 2, 3])))
    build = tuple(rng.choice(["b1", "sha", "7"]) for _ in range(rng.choice([0, 0, 1, 2])))
    return rng.randint(0, 3), rng.randint(0, 3), rng.randint(0, 3), prerelease, build


# Capacities as a ResourceSlice states them: Quantity.UnmarshalJSON parses the text (or the JSON number) as written.
FORM_DEVICE = {"capacity": {"one": {"value": "1"}, "milli": {"value": "1000m"}, "half": {"value": "1500m"},
                            "number": {"value": 4}, "pebi": {"value": "1Pi"}, "kibi": {"value": "1Ki"}}}
CAPACITY = 'device.capacity["gpu.nvidia.com"]'
FORM_CASES = [
    # int64Amount.Add/Sub: aligned at the smaller scale, inf.Dec from the first int64 overflow on
    'quantity("1.5").add(quantity("0.5")).isInteger()', 'quantity("1.5").add(quantity("1500m")).asInteger() == 3',
    'quantity("1k").sub(quantity("1k")).isInteger()', 'quantity("1k").sub(1000).isInteger()',
    'quantity("1m").sub(quantity("1m")).isInteger()', 'quantity("0").sub(quantity("1m")).isInteger()',
    'quantity("4E").add(quantity("5E")).isInteger()', 'quantity("9E").add(quantity("1E")).isInteger()',
    'quantity("9E").add(quantity("-1E")).isInteger()', 'quantity("1").add(9223372036854775806).isInteger()',
    'quantity("1").add(9223372036854775807).isInteger()',
    'quantity("-1").sub(9223372036854775807).asInteger() == -9223372036854775808',
    'quantity("-2").sub(9223372036854775807).isInteger()', 'quantity("0").sub(-9223372036854775807 - 1).isInteger()',
    'quantity("1").sub(-9223372036854775807 - 1).isInteger()', 'quantity("1n").add(quantity("999999999n")).isInteger()',
    # ParseQuantity's fast path: 18 digits, binary suffixes by exponent, scales down to nano
    'quantity("1e18").isInteger()', 'quantity("10e18").isInteger()', 'quantity("1e19").isInteger()',
    'quantity("0e2147483647").isInteger()', 'quantity("123456789012345678").isInteger()',
    'quantity("1234567890123456789").isInteger()', 'quantity("12345678901234567.8").isInteger()',
    'quantity("8Ki").isInteger()', 'quantity("1Ti").isInteger()', 'quantity("99Ti").isInteger()',
    'quantity("999Ti").isInteger()', 'quantity("1Ei").isInteger()', 'quantity("000").isInteger()',
    'quantity("0.").isInteger()', 'quantity(".5k").isInteger()', 'quantity("0.000000001").isInteger()',
    # equal values of different forms are equal wherever Quantity.Equal decides
    '[quantity("1")] == [quantity("1000m")]', '[quantity("1000m"), quantity("2")] == [quantity("1"), quantity("2000m")]',
    '[quantity("1")] != [quantity("1000m")]', 'quantity("1") in [quantity("1000m")]',
    'quantity("1000m") in [quantity("2"), quantity("1")]', '!(quantity("3") in [quantity("2"), quantity("1")])',
    '{"a": quantity("1")} == {"a": quantity("1000m")}', '{"a": [quantity("1")]} == {"a": [quantity("1000m")]}',
    'cel.bind(x, [quantity("1000m")], x.exists(q, q == quantity("1")))',
    '[quantity("1"), quantity("1000m")].indexOf(quantity("1000m")) == 0',
    # capacities keep the form of the text they were written in
    *[f"{CAPACITY}.{name}.isInteger()" for name in FORM_DEVICE["capacity"]],
    f'{CAPACITY}.milli.asInteger() == 1', f'{CAPACITY}.one == quantity("1000m")',
    f'{CAPACITY}.milli == {CAPACITY}.one', f'quantity("1") in [{CAPACITY}.milli]',
    f'{CAPACITY}.one.add({CAPACITY}.milli).isInteger()', f'{CAPACITY}.number.add(1).asInteger() == 5',
]
# Kubernetes' Cmp converts its receiver to inf.Dec in place (quantity.go AsDec), and the CEL library's add copies a
# Quantity shallowly, so an inf.Dec receiver's sum is written into the shared inf.Dec: values change under a binding.
IN_PLACE_CASES = ['cel.bind(x, quantity("1"), x.compareTo(quantity("1Pi")) < 0 && x.isInteger())',
                  'cel.bind(x, quantity("1Pi"), x.add(quantity("1")).compareTo(x) == 0)']


def _case(case_id: str, kind: str, expression: str, device: dict | None = None) -> dict:
    return {"id": case_id, "class": kind, "expression": expression, "driver": "gpu.nvidia.com", "device": device or {},
            "features": {"consumableCapacity": False}, "envType": "stored"}


def generate_cases() -> list[dict]:
    rng = random.Random(SEED)
    cases = []
    texts = EDGE_QUANTITIES + [_quantity(rng) for _ in range(PAIRS)]
    for index, left in enumerate(texts):
        right = texts[(index * 7 + 3) % len(texts)] if index < len(EDGE_QUANTITIES) else _quantity(rng)
        x, y = reference.quantity_value(left), reference.quantity_value(right)
        a, b = json.dumps(left), json.dumps(right)
        cases += [
            _case(f"q{index}-cmp", "reference", f"quantity({a}).compareTo(quantity({b})) == {reference.compare(x, y)}"),
            _case(f"q{index}-add", "reference",
                  f"quantity({a}).add(quantity({b})) == quantity({json.dumps(reference.quantity_text(x + y))})"),
            _case(f"q{index}-sub", "reference",
                  f"quantity({a}).sub(quantity({b})) == quantity({json.dumps(reference.quantity_text(x - y))})"),
            _case(f"q{index}-sign", "reference", f"sign(quantity({a})) == {reference.compare(x, 0)}"),
            _case(f"q{index}-isInteger", "int64-form", f"quantity({a}).isInteger()"),
            _case(f"q{index}-add-isInteger", "int64-form", f"quantity({a}).add(quantity({b})).isInteger()"),
        ]
        if x.denominator == 1:
            cases.append(_case(f"q{index}-asInteger", "int64-form", f"quantity({a}).asInteger() == {x.numerator}"))
    ordered = list(zip(SEMVER_ORG_ORDER, SEMVER_ORG_ORDER[1:]))
    cases += [_case(f"v-semver-org-{index}", "reference", f"semver({json.dumps(a)}).isLessThan(semver({json.dumps(b)}))")
              for index, (a, b) in enumerate(ordered)]
    for index in range(VERSION_PAIRS):
        left, right = _version(rng), _version(rng)
        if index % 4 == 0:
            right = left[:3] + right[3:]  # the same release: the pre-release identifiers decide
        a, b = json.dumps(reference.version_text(left)), json.dumps(reference.version_text(right))
        cases.append(_case(f"v{index}-cmp", "reference",
                           f"semver({a}).compareTo(semver({b})) == {reference.precedence(left, right)}"))
    cases += [_case(f"form-{index}", "int64-form", expression, FORM_DEVICE) for index, expression in enumerate(FORM_CASES)]
    cases += [_case(f"in-place-{index}", "in-place", expression) for index, expression in enumerate(IN_PLACE_CASES)]
    return cases


if __name__ == "__main__":
    print(json.dumps({"cases": generate_cases()}, indent=1))
