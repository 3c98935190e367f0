"""ComputeDomains (multi-node NVLink, IMEX): the controller that turns one into its ResourceClaimTemplates, its
IMEX daemons and its status, as NVIDIA's compute-domain-controller does. The API itself (schema, defaults, update
rule) is gpudra.api.schema.computedomain."""

from gpudra.computedomain.controller import DomainPlan, World, plan

__all__ = ["DomainPlan", "World", "plan"]
