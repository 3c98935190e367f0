"""The DRA CEL environment: compile device selectors once, evaluate them on many devices.

    from gpudra.cel import compile_selector, device_input, CELCompileError, CELRuntimeError
    selector = compile_selector('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0')
    selector.evaluate(device_input("gpu.nvidia.com", slice_device_dict))  # -> bool

Engine: cel-expr-python (Google's cel-cpp with its type checker); see environment.py for the libraries
and the adapter that closes its gaps against Kubernetes' cel-go environment.
"""

from gpudra.cel.device import DeviceInput, device_input, split_qualified_name
from gpudra.cel.errors import CELCompileError, CELRuntimeError
from gpudra.cel.selector import MAX_COST, MAX_EXPRESSION_BYTES, Selector, compile_selector

__all__ = [
    "CELCompileError",
    "CELRuntimeError",
    "DeviceInput",
    "MAX_COST",
    "MAX_EXPRESSION_BYTES",
    "Selector",
    "compile_selector",
    "device_input",
    "split_qualified_name",
]
