"""cel-go's compile-time cost estimate of a selector, as the Kubernetes API server computes it.

A port of cel-go v0.26.0 checker/cost.go (`Cost`, the `coster`), with the estimators the DRA environment installs
(gpudra.cel.estimate_library) and its declared sizes (gpudra.cel.estimate_sizes), and k8s.io/apiserver's
`PresenceTestHasCost(false)` (environment/base.go: `has()` itself costs nothing). The API server refuses an
expression whose estimate's maximum exceeds CELSelectorExpressionMaxCost (dynamic-resource-allocation
cel/compile.go `MaxCost`). Checked against cel-go's own estimates for every case of tests/data/conformance/cel.

The estimate walks the tree cel-expr-python's checker produced for gpudra's checking text, so the shapes
gpudra.cel.source rewrites are costed as the user's text is in cel-go:

- `__gpudra_attributes[?D].orValue(__gpudra_no_attributes)` is `device.attributes[D]` (or `device.attributes.d`,
  told apart by the user's text), `optional.of(…)` around it `device.attributes[?D]`, a bare
  `__gpudra_attributes` `device.attributes` (and the same for capacity);
- `true` standing for `has(device.attributes.d)` costs the operand;
- a folded `kubernetes.Quantity{s: …}` / `kubernetes.Semver{s: …}` costs the `quantity("…")` call it replaced;
- `X.__gpudra_format_errors(s)[?"errors"]` is `X.validate(s)`, `__gpudra_format_named(n)[?"format"]`
  `format.named(n)`;
- `R.transformList(…, [dyn(k), dyn(e)]).__gpudra_map_from_entries()` is `R.transformMap(…, e)` and
  `R.transformList(…, e).__gpudra_merge_maps()` `R.transformMapEntry(…, e)` (an accumulator map, `cel.@mapInsert`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpudra.cel import source
from gpudra.cel.ast import Node, checked_syntax_tree, fields, walk
from gpudra.cel.checks import _payload, _positions, _type_map
from gpudra.cel.nesting import HOISTED_PREFIX
from gpudra.cel.estimate_library import AstNode, library_estimate, overload_estimate, size_estimate
from gpudra.cel.estimate_sizes import (
    LIST_CREATE_BASE_COST, MAP_CREATE_BASE_COST, MAX_U64, ONE, SELECT_AND_IDENT_COST, STRING_TRAVERSAL_COST_FACTOR,
    STRUCT_CREATE_BASE_COST, UNKNOWN, ZERO, REGEX_STRING_LENGTH_COST_FACTOR, Range, dra_size, fixed, is_scalar,
    kind, split_parameters,
)

_ACCUMULATORS = ("@result", "@__result__")
_DOMAIN_VARIABLES = {source.ATTRIBUTES_VARIABLE: "attributes", source.CAPACITY_VARIABLE: "capacity"}
_FOLDED_TYPES = ("kubernetes.Quantity", "kubernetes.Semver")
_COMPARISONS = frozenset({
    "less_string", "greater_string", "less_equals_string", "greater_equals_string", "less_bytes", "greater_bytes",
    "less_equals_bytes", "greater_equals_bytes", "equals", "not_equals",
})


@dataclass
class _Entry:
    """entrySizeEstimate: a container's kind and the size bounds of its keys (indexes) and values."""

    container: str
    key: Range
    value: Range


def _union_entries(a: _Entry | None, b: _Entry | None) -> _Entry | None:
    if a is None or b is None:
        return None
    return _Entry(a.container, a.key.union(b.key), a.value.union(b.value))


@dataclass
class _Local:
    path: tuple[str, ...] | None
    size: Range | None
    entry: _Entry | None


def _references(payload: bytes) -> dict[int, list[str]]:
    """CheckedExpr.reference_map: node id -> overload ids."""
    references: dict[int, list[str]] = {}
    for number, _, entry in fields(payload):
        if number != 2:
            continue
        key, overloads = 0, []
        for n, _, value in fields(entry):
            if n == 1:
                key = value
            elif n == 2:
                overloads = [bytes(v).decode() for m, _, v in fields(value) if m == 3]
        references[key] = overloads
    return references


def _overload_name(function: str, overload: str) -> str:
    # cel-cpp names the lists extension's range overload `list_range`, cel-go `lists_range`
    return "lists_range" if function == "lists.range" else overload


class _Coster:
    def __init__(self, expression: str, rewritten: source.Rewritten, serialized: bytes):
        payload = _payload(serialized)
        self.expression = expression
        self.rewritten = rewritten
        self.types = _type_map(payload)
        self.overloads = _references(payload)
        self.positions = _positions(payload)
        self.paths: dict[int, tuple[str, ...] | None] = {}
        self.locals: dict[str, list[_Local]] = {}
        self.sizes: dict[int, Range] = {}
        self.entries: dict[int, _Entry] = {}
        self.root = checked_syntax_tree(serialized)
        self._element_results(self.root)

    def _element_results(self, root: Node) -> None:
        """cel-go types `sum`/`min`/`max` of a list(T) as T (k8s.io/apiserver library/lists.go); cel-expr-python
        declares them on list(dyn) returning dyn."""
        for node in walk(root):
            if node.kind == "call" and node.value in ("sum", "min", "max") and node.target is not None:
                head, parameters = split_parameters(self.types.get(node.target.id, "dyn"))
                if head == "list" and parameters and parameters[0] != "dyn":
                    self.types[node.id] = parameters[0]

    # ----- the user's text behind a rewritten node ------------------------------------------------------
    def _original(self, node: Node) -> str:
        position = self.positions.get(node.id)
        if position is None:
            return ""
        return self.expression[self.rewritten.original_offset(position):]

    # ----- bookkeeping (cel-go coster helpers) ------------------------------------------------------------
    def type_of(self, node: Node) -> str:
        return self.types.get(node.id, "dyn")

    def path_of(self, node: Node) -> tuple[str, ...] | None:
        if node.kind == "ident" and self.locals.get(node.value):
            return self.locals[node.value][-1].path
        return self.paths.get(node.id)

    def _extend(self, node: Node, name: str) -> tuple[str, ...]:
        return (self.path_of(node) or ()) + (name,)

    def push(self, name: str, path: tuple[str, ...] | None, size: Range | None, entry: _Entry | None) -> None:
        self.locals.setdefault(name, []).append(_Local(path, size, entry))

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def ast_node(self, node: Node) -> AstNode:
        path = self.path_of(node)
        if path and path[0] in _ACCUMULATORS:
            path = None
        return AstNode(path, self.type_of(node), node, self.size(node))

    def size(self, node: Node) -> Range | None:
        """computeSize: recorded, from the literal, the environment along the path, the type, a local's."""
        if node.id in self.sizes:
            return self.sizes[node.id]
        literal = _literal_size(node)
        if literal is not None:
            return literal
        declared = dra_size(self.path_of(node))
        if declared is not None:
            self.sizes[node.id] = declared
            return declared
        if is_scalar(self.type_of(node)):
            return ONE
        if node.kind == "ident" and self.locals.get(node.value):
            return self.locals[node.value][-1].size
        return None

    def size_or_unknown(self, node: Node) -> Range:
        found = self.size(node)
        return found if found is not None else UNKNOWN

    def entry(self, node: Node) -> _Entry | None:
        if node.id in self.entries:
            return self.entries[node.id]
        if node.kind == "ident" and self.locals.get(node.value):
            return self.locals[node.value][-1].entry
        return None

    def copy_sizes(self, destination: Node, origin: Node) -> None:
        found, entry = self.size(origin), self.entry(origin)
        if found is not None:
            self.sizes[destination.id] = found
        if entry is not None:
            self.entries[destination.id] = entry

    # ----- costs ------------------------------------------------------------------------------------------
    def cost(self, node: Node | None) -> Range:
        if node is None:
            return ZERO
        if node.kind == "const":
            if node.value is True and self._original(node).startswith("has"):
                return fixed(2)  # has(device.attributes.d): device and the select; has() itself is free
            return ZERO
        if node.kind == "ident":
            return self._ident(node)
        if node.kind == "select":
            return self._select(node)
        if node.kind == "call":
            return self._call(node)
        if node.kind == "list":
            return self._list(node)
        if node.kind == "struct":
            return self._struct(node)
        if node.kind == "comprehension":
            return self._bind(node) if _is_bind(node) else self._comprehension(node)
        return ZERO

    def _ident(self, node: Node) -> Range:
        if node.value in _DOMAIN_VARIABLES:  # device.attributes / device.capacity
            self.paths[node.id] = ("device", _DOMAIN_VARIABLES[node.value])
            return fixed(2 * SELECT_AND_IDENT_COST)
        local = self.locals.get(node.value)
        self.paths[node.id] = local[-1].path if local else (node.value,)
        if str(node.value).startswith(HOISTED_PREFIX):
            return ZERO  # gpudra.cel.nesting's binding stands for the text it carries, costed there
        return fixed(SELECT_AND_IDENT_COST)

    def _select(self, node: Node) -> Range:
        assert node.target is not None
        if node.test_only:
            return self.cost(node.target)  # PresenceTestHasCost(false)
        cost = self.cost(node.target)
        if kind(self.type_of(node.target)) in ("map", "struct"):
            cost = cost.add(fixed(SELECT_AND_IDENT_COST))
        self.paths[node.id] = self._extend(node.target, node.value)
        return cost

    def _list(self, node: Node) -> Range:
        cost = ZERO
        items = Range(0 if not node.args else MAX_U64, 0)
        for element in node.args:
            cost = cost.add(self.cost(element))
            items = items.union(self.size_or_unknown(element))
        self.entries[node.id] = _Entry("list", ONE, items)
        return cost.add(fixed(LIST_CREATE_BASE_COST))

    def _struct(self, node: Node) -> Range:
        if node.value in _FOLDED_TYPES:
            folded = _folded_literal(self._original(node))
            if folded is not None:  # quantity("…")/semver("…"): a traversal of the literal
                return fixed(len(folded)).factor(STRING_TRAVERSAL_COST_FACTOR)
        if node.value:  # a message
            cost = ZERO
            for value in node.args:
                cost = cost.add(self.cost(value))
            return cost.add(fixed(STRUCT_CREATE_BASE_COST))
        cost, keys = ZERO, Range(0 if not node.args else MAX_U64, 0)
        values = keys
        for key, value in zip(node.keys, node.args):
            cost = cost.add(self.cost(key)).add(self.cost(value))
            keys = keys.union(self.size_or_unknown(key) if key is not None else UNKNOWN)
            values = values.union(self.size_or_unknown(value))
        self.entries[node.id] = _Entry("map", keys, values)
        return cost.add(fixed(MAP_CREATE_BASE_COST))

    def _iteration_variables(self, node: Node) -> None:
        range_node = node.iter_range
        assert range_node is not None
        entry = self.entry(range_node)
        container = entry.container if entry is not None else kind(self.type_of(range_node))
        path = self.path_of(range_node) or ()
        if node.iter_var2:
            self.push(node.iter_var, path + ("@indices" if container == "list" else "@keys",),
                      entry.key if entry else None, None)
            self.push(node.iter_var2, path + ("@items" if container == "list" else "@values",),
                      entry.value if entry else None, None)
        elif container == "list":
            self.push(node.iter_var, path + ("@items",), entry.value if entry else None, None)
        else:
            self.push(node.iter_var, path + ("@keys",), entry.key if entry else None, None)

    def _comprehension(self, node: Node) -> Range:
        assert node.iter_range is not None and node.accu_init is not None
        cost = self.cost(node.iter_range).add(self.cost(node.accu_init))
        self.push(node.accu_var, self.path_of(node.accu_init), self.size(node.accu_init), self.entry(node.accu_init))
        self._iteration_variables(node)
        loop = self.cost(node.loop_condition)
        step = self.cost(node.loop_step)
        self.pop(node.iter_var)
        if node.iter_var2:
            self.pop(node.iter_var2)
        cost = cost.add(self.cost(node.result))
        self.pop(node.accu_var)
        iterations = self.size_or_unknown(node.iter_range)
        cost = cost.add(iterations.multiply(step.add(loop)))
        if node.accu_init.kind == "const":
            found = self.size(node.accu_init)
            if found is not None:
                self.sizes[node.id] = found
        elif node.accu_init.kind in ("list", "struct"):
            self.sizes[node.id] = iterations
            step_entry = self.entry(node.loop_step) if node.loop_step is not None else None
            if step_entry is not None:
                self.entries[node.id] = step_entry
        return cost

    def _bind(self, node: Node) -> Range:
        assert node.accu_init is not None and node.result is not None
        cost = self.cost(node.accu_init)
        if not node.accu_var.startswith(HOISTED_PREFIX):  # (gpudra.cel.nesting's bindings are not the user's)
            cost = cost.add(self.cost(node.iter_range))
        self.push(node.accu_var, self.path_of(node.accu_init), self.size(node.accu_init), self.entry(node.accu_init))
        cost = cost.add(self.cost(node.result))
        self.pop(node.accu_var)
        self.copy_sizes(node, node.result)
        return cost

    def _call(self, node: Node) -> Range:
        special = self._rewritten_call(node)
        if special is not None:
            return special
        name = node.value or ""
        if name == "dyn" and node.args:
            cost = ONE.add(self.cost(node.args[0]))
            self.copy_sizes(node, node.args[0])
            return cost
        arg_costs = [self.cost(argument) for argument in node.args]
        arg_nodes = [self.ast_node(argument) for argument in node.args]
        overloads = self.overloads.get(node.id, [])
        if not overloads:
            return ZERO
        cost = ZERO
        target: AstNode | None = None
        if node.target is not None:
            cost = self.cost(node.target)
            target = self.ast_node(node.target)
        function_cost = Range(MAX_U64, 0)
        result: Range | None = None
        for overload in overloads:
            call_cost, call_size = self._function_cost(node, name, _overload_name(name, overload), target,
                                                       arg_nodes, arg_costs)
            function_cost = function_cost.union(call_cost)
            if call_size is not None:
                result = call_size if result is None else result.union(call_size)
            if overload in ("index_list", "index_map") and node.args:
                container_entry = self.entry(node.args[0])
                result = container_entry.value if container_entry is not None else None
                self.paths[node.id] = self._extend(node.args[0], "@items" if overload == "index_list" else "@values")
            if result is None:
                result = self.size(node)
        if result is not None:
            self.sizes[node.id] = result
        return cost.add(function_cost)

    def _function_cost(self, node: Node, function: str, overload: str, target: AstNode | None,
                       args: list[AstNode], arg_costs: list[Range]) -> tuple[Range, Range | None]:
        arg_sum = ZERO
        for arg_cost in arg_costs:
            arg_sum = arg_sum.add(arg_cost)
        found = overload_estimate(function, overload, target, args) or library_estimate(function, target, args)
        if found is not None:
            return found[0].add(arg_sum), found[1]
        size = self.size_or_unknown
        if overload == "string_format" and target is not None:
            return size_estimate(target).factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), None
        if overload in ("string_to_bytes", "bytes_to_string", "strings_quote") and len(args) == 1:
            operand = size(args[0].node) if args[0].node is not None else UNKNOWN
            cost = operand.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum)
            if overload == "string_to_bytes":  # (Go's uint64 arithmetic wraps)
                return cost, Range(operand.lo, _wrap(operand.hi * 4))
            if overload == "bytes_to_string":
                return cost, Range(operand.lo // 4, operand.hi)
            return cost, Range(_wrap(operand.lo + 2), _wrap(operand.hi * 2 + 2))
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return size_estimate(args[0]).factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), None
        if overload == "in_list" and len(args) == 2:
            return size_estimate(args[1]).factor(1).add(arg_sum), None
        if overload == "matches_string" and target is not None and len(args) == 1:
            text = size_estimate(target).add(ONE).factor(STRING_TRAVERSAL_COST_FACTOR)
            regex = size_estimate(args[0]).factor(REGEX_STRING_LENGTH_COST_FACTOR)
            return text.multiply(regex).add(arg_sum), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            text = size_estimate(target).factor(STRING_TRAVERSAL_COST_FACTOR)
            return text.multiply(size_estimate(args[0]).factor(STRING_TRAVERSAL_COST_FACTOR)).add(arg_sum), None
        if overload in ("logical_or", "logical_and") and len(arg_costs) == 2:
            left, right = arg_costs
            return Range(left.lo, left.add(right).hi), None
        if overload == "conditional" and len(args) == 3:
            result = size_estimate(args[1]).union(size_estimate(args[2]))
            entries = [self.entry(a.node) if a.node is not None else None for a in args[1:]]
            joined = _union_entries(entries[0], entries[1])
            if joined is not None:
                self.entries[node.id] = joined
            return arg_costs[0].add(arg_costs[1].union(arg_costs[2])), result
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            result = size_estimate(args[0]).add(size_estimate(args[1]))
            entries = [self.entry(a.node) if a.node is not None else None for a in args]
            joined = _union_entries(entries[0], entries[1])
            if joined is not None:
                self.entries[node.id] = joined
            if overload == "add_list":
                return ONE.add(arg_sum), result
            return result.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), result
        if overload in _COMPARISONS and len(args) == 2:
            smallest = min(size_estimate(args[0]).hi, size_estimate(args[1]).hi)
            return Range(1 if smallest > 0 else 0, smallest).factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), None
        return ONE.add(arg_sum), None

    # ----- gpudra.cel.source's rewrites, costed as the user's text -----------------------------------------
    def _rewritten_call(self, node: Node) -> Range | None:
        name = node.value
        if name == "orValue" and _is_domain_lookup(node.target):
            assert node.target is not None
            lookup = node.target
            domain_map, key = lookup.args[0], lookup.args[1]
            cost = self.cost(domain_map).add(self.cost(key)).add(ONE)  # the index (or the select on a map)
            original = self._original(lookup)
            if original.startswith("["):
                self.paths[node.id] = self._extend(domain_map, "@values")
            else:
                self.paths[node.id] = self._extend(domain_map, str(key.value))
            return cost
        if name == "optional.of" and node.args and not self._original(node).startswith("("):
            return self.cost(node.args[0])  # device.attributes[?D]: the optional index costs what the index does
        if name == "_[?_]" and len(node.args) == 2 and node.args[0].kind == "call":
            inner = node.args[0]
            if inner.value == source.FORMAT_ERRORS and inner.target is not None:  # X.validate(s)
                validate = replace(inner, value="validate")
                return self._call(validate)
            if inner.value == source.FORMAT_NAMED:  # format.named(n)
                return ONE.add(self.cost(inner.args[0]) if inner.args else ZERO)
        if name in (source.MAP_FROM_ENTRIES, source.MERGE_MAPS) and node.target is not None:
            comprehension = node.target
            if comprehension.kind == "comprehension":
                cost = self.cost(_as_map_transform(comprehension, name == source.MAP_FROM_ENTRIES))
                return cost
        return None


def _wrap(value: int) -> int:
    return value % (1 << 64)


def _is_domain_lookup(node: Node | None) -> bool:
    return (node is not None and node.kind == "call" and node.value == "_[?_]" and len(node.args) == 2
            and node.args[0].kind == "ident" and node.args[0].value in _DOMAIN_VARIABLES)


def _literal_size(node: Node) -> Range | None:
    """computeExprSize: a literal's size (a string's in code points), a list or map literal's entries."""
    if node.kind == "const":
        if isinstance(node.value, str):
            return fixed(len(node.value))
        if isinstance(node.value, bytes):
            return fixed(len(node.value))
        return ONE
    if node.kind == "list" or (node.kind == "struct" and not node.value):
        return fixed(len(node.args))
    return None


def _folded_literal(original: str) -> str | None:
    """The string literal of the `quantity("…")`/`semver("…"[, b])` call the user wrote at this position."""
    tokens = source.tokenize(original[:200])
    if len(tokens) >= 3 and tokens[0].text in ("quantity", "semver") and tokens[1].text == "(":
        return source._literal_text(tokens[2])
    return None


def _is_bind(node: Node) -> bool:
    """cel-go coster.isBind: an empty range, a false condition, an accumulator not named by a macro."""
    return (node.iter_range is not None and node.iter_range.kind == "list" and not node.iter_range.args
            and node.loop_condition is not None and node.loop_condition.kind == "const"
            and node.loop_condition.value is False and node.accu_var != "@result")


def _as_map_transform(comprehension: Node, from_entries: bool) -> Node:
    """The comprehension cel-go's transformMap/transformMapEntry macros build (ext/comprehensions.go): a map
    accumulator and `cel.@mapInsert(@result, k, e)` (or `(@result, e)`), from gpudra's list-building one."""
    step = comprehension.loop_step
    assert step is not None

    def insert(addition: Node) -> Node:
        # `@result + [X]`: X is `[dyn(k), dyn(e)]` for transformMap, the entry map for transformMapEntry
        accumulator, appended = addition.args[0], addition.args[1].args[0]
        if from_entries:
            key, value = (part.args[0] if part.kind == "call" and part.args else part for part in appended.args)
            arguments = [accumulator, key, value]
        else:
            arguments = [accumulator, appended]
        return Node("call", id=addition.id, value="cel.@mapInsert", args=arguments)

    if step.kind == "call" and step.value == "_?_:_" and len(step.args) == 3:
        new_step = replace(step, args=[step.args[0], insert(step.args[1]), step.args[2]])
    else:
        new_step = insert(step)
    accu_init = Node("struct", id=comprehension.accu_init.id if comprehension.accu_init else 0)
    return replace(comprehension, accu_init=accu_init, loop_step=new_step)


def estimate(expression: str, rewritten: source.Rewritten, serialized: bytes) -> int:
    """The maximum of cel-go's cost estimate of `expression` (checked as `rewritten.text`, serialised)."""
    coster = _Coster(expression, rewritten, serialized)
    return coster.cost(coster.root).hi
