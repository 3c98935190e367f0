"""Python functions for cel-expr-python, with its reference leak contained.

cel-expr-python 0.1.3 calls a Python function as
`result = PyObject_CallObject(function, args_tuple)` and never releases `args_tuple` nor `result`
(cel_expr_python/py_cel_function.cc, PyCelFunctionAdapter::Invoke; fixed upstream after the
release). Every call therefore keeps the argument tuple, the argument objects the binding converted
from CEL values, and one reference to the result: about 220 bytes for two short strings, about
1 KiB for message arguments. A long-running scheduler or driver grows without bound.

`overload()` wraps each implementation so that those references are given back once the binding is
done with them:
- the result: the wrapper remembers it and drops the binding's reference later;
- the argument tuple: the binding builds it (a GC-tracked tuple) right before the call and the
  wrapper's own `*args` tuple is built from it at the call, so in the young GC generation, which
  lists objects in the order they were tracked, the binding's tuple is the nearest tuple before
  ours (only objects the binding converted for the arguments, such as lists, dicts and protobuf
  messages, can lie between). It is taken only when it holds exactly our arguments, in order, and
  nobody but the binding holds it.
Both are queued when the call returns and released at the next call on the same thread or by
`settle()` after an evaluation, when the binding no longer touches them (it converts the result
before it returns to cel-cpp); a function that evaluates CEL itself never sees its own call released.

Whether the installed binding leaks is measured once, with a probe function, not assumed from its
version: a binding that releases its references gets no correction (it would be a double free), and
a Python where the tuple cannot be found (another GC design, free threading) gets none either and
simply leaks as before. Anything unexpected in a call leaves that call uncorrected, never freed twice.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import sysconfig
import threading
from typing import Any, Callable

from cel_expr_python import cel

_decref = ctypes.pythonapi.Py_DecRef
_decref.argtypes = [ctypes.py_object]
_decref.restype = None

# getrefcount of the binding's tuple while the wrapper looks at it: the binding's reference, the
# list from gc.get_objects, the loop variable and getrefcount's own argument.
_ONLY_THE_BINDING = 4
# Objects the binding may track between its tuple and ours while converting the arguments (lists,
# dicts, protobuf messages); the first tuple before ours must be the binding's or nothing is taken.
_MAX_CONVERTED_OBJECTS = 64
# Past this many young objects (GC disabled or frozen) scanning would cost more than the leak.
_MAX_YOUNG_OBJECTS = 5000

_local = threading.local()
_correct: bool | None = None  # None until the probe ran; then whether calls are corrected


def _owed() -> list[Any]:
    owed = getattr(_local, "owed", None)
    if owed is None:
        owed = _local.owed = []
    return owed


def settle() -> None:
    """Give back the references the binding kept from finished calls on this thread."""
    owed = getattr(_local, "owed", None)
    if not owed:
        return
    _local.owed = []
    for obj in owed:
        _decref(obj)


def _binding_tuple(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The argument tuple the binding built for this call, or None when it cannot be told for sure."""
    if gc.get_count()[0] > _MAX_YOUNG_OBJECTS:
        return None
    young = gc.get_objects(generation=0)
    index = len(young) - 1
    while index >= 0 and young[index] is not args:
        index -= 1
    for position in range(index - 1, max(index - 1 - _MAX_CONVERTED_OBJECTS, -1), -1):
        obj = young[position]
        if type(obj) is tuple:
            if (
                len(obj) == len(args)
                and all(mine is theirs for mine, theirs in zip(args, obj))
                and sys.getrefcount(obj) == _ONLY_THE_BINDING
            ):
                return obj
            return None
    return None


def _corrected(impl: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        settle()  # earlier calls on this thread are finished; a call that is still running has not queued yet
        leaked_args = _binding_tuple(args)
        try:
            result = impl(*args)  # an exception: the binding gets NULL and keeps no result
        finally:
            if leaked_args is not None:
                _owed().append(leaked_args)
        _owed().append(result)
        return result

    call.__dict__["__wrapped__"] = impl  # what functools.wraps would set
    call.__name__ = getattr(impl, "__name__", "call")
    return call


def overload(overload_id: str, result: cel.Type, params: list[Any], impl: Callable[..., Any] | None = None,
             member: bool = True) -> cel.Overload:
    """`cel.Overload`, with the binding's references of each call to `impl` given back.

    The wrapper must only ever be called by the binding: a tuple found for a direct Python call
    would not be the binding's."""
    if _correct is None:
        _probe()
    wrapped = _corrected(impl) if impl is not None and _correct else impl
    return cel.Overload(overload_id, result, params, is_member=member, impl=wrapped)


def _probe() -> None:
    """Decide whether calls are corrected: call a function through the binding and count references."""
    global _correct
    _correct = False
    if sysconfig.get_config_var("Py_GIL_DISABLED") or sys.implementation.name != "cpython":
        return
    seen: dict[str, Any] = {}

    def probe_impl(*args: Any) -> Any:
        seen["tuple"] = _binding_tuple(args)
        seen["result"] = result = args[0] + "!"
        return result

    env = cel.NewEnv(
        variables={"x": cel.Type.STRING},
        functions=[cel.FunctionDecl("gpudraProbe", [cel.Overload("gpudra_probe", cel.Type.STRING, [cel.Type.STRING],
                                                                 is_member=False, impl=probe_impl)])],
    )
    program = env.compile("gpudraProbe(x)")
    for _ in range(3):  # a collection between the binding's tuple and ours hides it; try again
        seen.clear()
        value = program.eval(env.Activation({"x": "probe"})).value()
        found, result = seen.get("tuple"), seen.get("result")
        if value == "probe!" and found is not None:
            break
    else:
        return
    # our references: `seen`'s, the local name and getrefcount's argument (+1 each if the binding kept one)
    tuple_kept = sys.getrefcount(found) - 3
    result_kept = sys.getrefcount(result) - 3
    if tuple_kept == 1 and result_kept == 1:
        _decref(found)
        _decref(result)
        _correct = True
