"""Thousands of mutated manifests: validation and --fix only ever produce clean Problems, never exceptions."""

import copy
import random

from gpudra.fix import fix_documents
from gpudra.api.load import Document, LoadError, load_paths, load_text
from gpudra.api.problems import Problem
from gpudra.api.validate import validate_documents

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = [d.obj for d in load_paths([os.path.join(ROOT, "examples", d) for d in
                                    ("article", "article-fixed", "workloads")])]
SEEDS += [d.obj for d in load_paths([os.path.join(ROOT, "examples", "cluster", "deviceclasses.yaml")])]
SEEDS.append(load_paths([os.path.join(ROOT, "examples", "cluster", "resourceslices.yaml")])[0].obj)
SEEDS += [d.obj for d in load_paths([os.path.join(ROOT, "tests", "data", "api", "v1beta1.yaml")])]

ODD_VALUES = [None, True, False, 0, -1, 2**70, 1.5, "", "x", "Bad_Name", "80Gi", "1.2.3", "nvidia.com/gpu",
              [], {}, [None], {"": None}, {"cel": {"expression": "device.attributes['a/b-c'] == 1"}},
              "device.attributes[\"memory\"]", "a" * 300, {"string": "16Gi"}, {"value": "x"}]
ODD_KEYS = ["basic", "exactly", "count", "cel", "selectors", "deviceClassName", "value", "", "requests", "name",
            "constraints", "quantity", "firstAvailable", "attributes", "capacity", "spec", "metadata"]


def _containers(value, found):
    if isinstance(value, dict):
        found.append(value)
        for item in value.values():
            _containers(item, found)
    elif isinstance(value, list):
        found.append(value)
        for item in value:
            _containers(item, found)
    return found


def mutate(obj, rng):
    obj = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 4)):
        target = rng.choice(_containers(obj, []))
        if isinstance(target, dict):
            choice = rng.random()
            if target and choice < 0.4:
                key = rng.choice(list(target))
                target[key] = copy.deepcopy(rng.choice(ODD_VALUES))
            elif target and choice < 0.6:
                del target[rng.choice(list(target))]
            else:
                target[rng.choice(ODD_KEYS)] = copy.deepcopy(rng.choice(ODD_VALUES + [rng.choice(SEEDS)]))
        elif isinstance(target, list):
            if target and rng.random() < 0.5:
                target[rng.randrange(len(target))] = copy.deepcopy(rng.choice(ODD_VALUES))
            else:
                target.extend(copy.deepcopy(target[:1]) * rng.randint(1, 40))
    return obj


def test_mutated_manifests_give_only_clean_problems():
    rng = random.Random(20260101)
    for _ in range(300):  # a fixed amount of work, not a time budget
        obj = mutate(rng.choice(SEEDS), rng)
        docs = [Document(obj, "fuzz.yaml", 1)] if isinstance(obj, dict) else []
        problems = validate_documents(docs)
        for problem in problems:
            assert isinstance(problem, Problem)
            text = problem.render()
            assert text.startswith("fuzz.yaml:doc 1 (") and "Traceback" not in text
        fixed = fix_documents(docs)
        validate_documents(fixed.documents)


def test_mutated_text_gives_documents_or_load_errors():
    rng = random.Random(7)
    text = open(os.path.join(ROOT, "examples", "article", "03-resourceclaim-nvlink.yaml"), encoding="utf-8").read()
    alphabet = ":-[]{}\n '\"#&*!|>%@`\t,?"
    for _ in range(1500):
        chars = list(text)
        for _ in range(rng.randint(1, 5)):
            position = rng.randrange(len(chars))
            if rng.random() < 0.5:
                chars[position] = rng.choice(alphabet)
            else:
                del chars[position]
        try:
            docs = load_text("".join(chars), "m.yaml")
        except LoadError as exc:
            assert str(exc).startswith("m.yaml")
            continue
        for problem in validate_documents(docs):
            assert isinstance(problem, Problem)
