"""The cases of tests/oracles/test_cel_quantity_oracle.py, generated from a fixed seed: quantity and semver
expressions whose expected answers come from tests/support/quantity_semver_reference.py (class `reference`), and
isInteger/asInteger expressions only cel-go can answer (class `int64-form`).

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


def _case(case_id: str, kind: str, expression: str) -> dict:
    return {"id": case_id, "class": kind, "expression": expression, "driver": "gpu.nvidia.com", "device": {},
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
    return cases


if __name__ == "__main__":
    print(json.dumps({"cases": generate_cases()}, indent=1))
