"""DeviceClasses as the allocator reads them, shared by every Allocator built from the same class objects.

kube-scheduler builds one allocator per pod from its informer caches; what does not change between pods
(parsed classes, the node-independent reading of each request) is kept here and reused while the class
objects stay the same objects with the same generation (`object_stamp`).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from gpudra.plain import as_dict, as_list, as_str

from .features import Features
from .model import CacheKey, object_stamp

if TYPE_CHECKING:
    from .plan import ClaimPlan  # plans are read with this table's classes


class ClassInfo:
    __slots__ = ("name", "raw", "selector_exprs", "empty_selector", "configs", "stamp")

    def __init__(self, raw: dict[str, Any]):
        self.raw = raw
        self.stamp = object_stamp(raw)
        self.name = as_str(as_dict(raw.get("metadata")).get("name"))
        spec = as_dict(raw.get("spec"))
        exprs = []
        self.empty_selector = None
        for i, selector in enumerate(as_list(spec.get("selectors"))):
            expression = as_dict(as_dict(selector).get("cel")).get("expression")
            if not isinstance(expression, str) or not expression:
                self.empty_selector = i if self.empty_selector is None else self.empty_selector
                continue
            exprs.append(expression)
        self.selector_exprs = tuple(exprs)
        self.configs = [c for c in as_list(spec.get("config")) if isinstance(c, dict)]

    def edited(self) -> bool:
        """Whether the class object was edited in place since it was read (a new generation or resourceVersion)."""
        return object_stamp(self.raw) != self.stamp


class ClassTable:
    """The classes by name, and the cache of claim readings (plan.ClaimPlan, which depends on the classes and
    the feature gates: both are this table's key)."""

    _shared: "OrderedDict[CacheKey, ClassTable]" = OrderedDict()
    _shared_limit = 8
    _last: "tuple[Features, ClassTable] | None" = None  # the table handed out last (checked first)

    @classmethod
    def shared(cls, device_classes: list[dict[str, Any]], features: Features) -> "ClassTable":
        last = cls._last
        if last is not None and (last[0] is features or last[0] == features) and last[1].same(device_classes):
            return last[1]
        key = (features, tuple(map(id, device_classes)))
        found = cls._shared.get(key)
        if found is not None and found.current():
            cls._shared.move_to_end(key)
        else:
            found = cls(device_classes)
            cls._shared[key] = found  # the table keeps the dicts alive, so their ids stay unique
            while len(cls._shared) > cls._shared_limit:
                cls._shared.popitem(last=False)
        cls._last = (features, found)
        return found

    @classmethod
    def forget_shared(cls) -> None:
        cls._shared.clear()
        cls._last = None

    def __init__(self, device_classes: list[dict[str, Any]]):
        self.raws = [as_dict(raw) for raw in device_classes]
        self.infos = [ClassInfo(raw) for raw in self.raws]
        self.classes: dict[str, ClassInfo] = {}
        for info in self.infos:
            self.classes[info.name] = info
        self.claim_plans: dict[int, ClaimPlan] = {}  # see Allocator.claim_plan

    def same(self, device_classes: list[dict[str, Any]]) -> bool:
        """Whether the table was built from these very objects, none edited in place since."""
        return (len(device_classes) == len(self.raws) and all(map(operator.is_, device_classes, self.raws))
                and self.current())

    def current(self) -> bool:
        """Whether no class object was edited in place since (its generation or resourceVersion changed)."""
        return not any(info.edited() for info in self.infos)
