"""Device selection: CEL selectors of classes and requests, evaluated lazily and cached.

Upstream evaluates class selectors then request selectors, stopping at the first false one, and a
compile or runtime error is fatal for the whole allocation — but only when a device that reaches the
selector check is examined. Selector outcomes are pure functions of (expression, device), so they are
cached for the allocator's lifetime and shared by every node and every allocate() call.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from types import ModuleType
from typing import Any

from .model import CacheKey, DeviceInfo

_search = threading.local()


class search_deadline:  # noqa: N801 - used as a function-like context manager
    """Evaluations started inside run under the search's deadline (time.monotonic()); past it they raise
    TimeoutError, which is never cached as an outcome. (A class, not @contextmanager: it wraps every
    allocate() call, and a generator-based one costs several times more.)"""

    __slots__ = ("deadline", "previous")

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.previous: float | None = None

    def __enter__(self) -> None:
        self.previous = getattr(_search, "deadline", None)
        _search.deadline = self.deadline

    def __exit__(self, *exc_info: object) -> None:
        _search.deadline = self.previous


class SelectorFailure:
    """A CEL error that becomes fatal once a device that hits it is examined."""

    __slots__ = ("owner", "index", "kind", "message")

    def __init__(self, owner: str | None, index: int, kind: str, message: str):
        self.owner = owner  # "class <name>" or None for the claim's own request selectors
        self.index = index
        self.kind = kind  # "compile" | "runtime"
        self.message = message

    def text(self, claim_label: str) -> str:
        owner = self.owner or f"claim {claim_label}"
        return f"{owner}: selector #{self.index}: CEL {self.kind} error: {self.message}"


_CEL: ModuleType | None = None  # gpudra.cel, once a selector is first evaluated


def _cel() -> ModuleType:
    global _CEL
    if _CEL is None:
        import gpudra.cel.device  # noqa: F401 - gpudra.cel.device, as an attribute of the package
        from gpudra import cel  # imported lazily: the CEL engine is only needed once a selector runs

        _CEL = cel
    return _CEL


@lru_cache(maxsize=4096)  # bounded: a long-running scheduler sees ever new expressions
def compile_expression(expression: str, consumable_capacity: bool, list_type_attributes: bool = True) -> Any:
    """The compiled selector, or the CELCompileError (cached either way). DRAListTypeAttributes types
    attribute values in the scheduler's environment too (gpudra.cel.release)."""
    cel = _cel()
    try:
        # kube-scheduler compiles stored expressions: no cost estimate, the runtime limit applies
        return cel.compile_selector(expression, consumable_capacity=consumable_capacity, stored=True,
                                    list_type_attributes=list_type_attributes)
    except cel.CELCompileError as err:
        return err


class SelectorEvaluator:
    """Per-allocator cache of (expression, device) → True | False | (kind, message)."""

    share = True  # False: evaluate on every device (tests compare both)

    def __init__(self, multiple_allocations_visible: bool, list_type_attributes: bool):
        # incubating and experimental hand the device's allowMultipleAllocations to CEL whatever
        # DRAConsumableCapacity says; stable does not (it reads as false there).
        self.multiple_allocations_visible = multiple_allocations_visible
        self.list_type_attributes = list_type_attributes
        self._inputs: dict[DeviceInfo, Any] = {}
        self._results: dict[tuple[str, DeviceInfo], Any] = {}
        # (expression, conversion error, what the expression reads of the device) -> outcome: devices alike in
        # what a selector reads share one evaluation (gpudra.cel.reads); a big cluster's devices differ in names
        # and UUIDs, which selectors seldom read.
        self._shared: dict[CacheKey, Any] = {}
        self._facts: dict[DeviceInfo, tuple[str | None, bool]] = {}  # gpudra.cel.device.input_facts
        self.evaluations = 0  # selector evaluations run (not answered from a cache)

    def _raw(self, device: DeviceInfo) -> dict[str, Any]:
        raw = device.raw
        if not self.multiple_allocations_visible and raw.get("allowMultipleAllocations"):
            raw = {k: v for k, v in raw.items() if k != "allowMultipleAllocations"}
        return raw

    def _input(self, device: DeviceInfo) -> Any:
        found = self._inputs.get(device)
        if found is None:
            found = _cel().device_input(device.driver, self._raw(device), list_type_attributes=self.list_type_attributes)
            self._inputs[device] = found
        return found

    def _shared_key(self, expression: str, reads: CacheKey | None, device: DeviceInfo) -> CacheKey | None:
        if reads is None:
            return None
        cel_device = _cel().device
        raw = self._raw(device)
        facts = self._facts.get(device)
        if facts is None:
            facts = self._facts[device] = cel_device.input_facts(device.driver, raw,
                                                                 list_type_attributes=self.list_type_attributes)
        error, plain_names = facts
        if error is not None:  # every selector fails on the device with this error, whatever it reads
            return (expression, error)
        projection = cel_device.device_projection(device.driver, raw, reads, plain_names)
        return None if projection is None else (expression, None, projection)

    def evaluate(self, expression: str, device: DeviceInfo) -> Any:
        key = (expression, device)
        found = self._results.get(key)
        if found is not None:
            return found
        # 1.36 compiles with `device.allowMultipleAllocations` declared whatever the gate says
        # (a selector using it is no compile error with DRAConsumableCapacity off).
        compiled = compile_expression(expression, True, self.list_type_attributes)
        if isinstance(compiled, Exception):
            found = ("compile", str(compiled))
        else:
            shared = self._shared_key(expression, compiled.reads, device) if self.share else None
            found = self._shared.get(shared) if shared is not None else None
            if found is None:
                self.evaluations += 1
                cel = _cel()
                try:
                    found = bool(compiled.evaluate(self._input(device), getattr(_search, "deadline", None)))
                except cel.CELRuntimeError as err:
                    found = ("runtime", str(err))
                if shared is not None:
                    self._shared[shared] = found
        self._results[key] = found
        return found

    def status(self, device: DeviceInfo, class_name: str, class_exprs: tuple[str, ...],
               request_exprs: tuple[str, ...]) -> bool | SelectorFailure:
        """True, False or a SelectorFailure for one device against class then request selectors."""
        for index, expression in enumerate(class_exprs):
            outcome = self.evaluate(expression, device)
            if outcome is True:
                continue
            if outcome is False:
                return False
            return SelectorFailure(f"class {class_name}", index, outcome[0], outcome[1])
        for index, expression in enumerate(request_exprs):
            outcome = self.evaluate(expression, device)
            if outcome is True:
                continue
            if outcome is False:
                return False
            return SelectorFailure(None, index, outcome[0], outcome[1])
        return True
