"""Why a pod (or claim) cannot be placed, and what would make it fit.

    from gpudra.explain import explain, render
    explanation = explain(objects, "pod/train-0", namespace="default")   # pure data (model.Explanation)
    print(render(explanation, "text"))                                    # or "yaml" / "json"

The scheduler (`gpudra.scheduler`) decides; explanations replay its queue up to the target pod, take its
per-node verdicts for every filter, and add for DynamicResources the device funnel of each request
(visible → class → selectors → free → taints → counters/capacity), failed constraints with the attribute
values seen, pool problems and CEL errors. `fixes.py` tries small changes and keeps those that work.
"""

from gpudra.explain.analyze import TargetError, explain, explain_claim, explain_pod, parse_target
from gpudra.explain.model import Explanation, Fix, NodeExplanation, Reason, RequestFunnel
from gpudra.explain.render import render

__all__ = ["Explanation", "Fix", "NodeExplanation", "Reason", "RequestFunnel", "TargetError", "explain",
           "explain_claim", "explain_pod", "parse_target", "render"]
