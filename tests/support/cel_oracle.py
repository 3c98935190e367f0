"""What the cel-oracle harness (k8s/cmd/cel-oracle: the real Kubernetes CEL environment) answered for a case, in
the words the CEL oracle tests compare gpudra's outcome with."""

from __future__ import annotations


def cel_go_outcome(answer: dict):
    if answer.get("compileError"):
        return "compile error"
    if answer.get("runtimeError"):
        return "runtime error"
    return answer["result"]
