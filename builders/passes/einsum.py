"""``einsum_to_matmul``: one- and two-operand Einsum as Transpose/Reshape/MatMul.

``einsum_plan`` is public so that ``python -m builders check`` reports exactly what the
pass would rewrite, and why it leaves an Einsum alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from builders.passes.graph import STANDARD_DOMAINS, Names, known_dim


@dataclass(frozen=True)
class EinsumPlan:
    """An Einsum as Transpose/Reshape -> MatMul -> Reshape/Transpose (labels after ellipsis expansion)."""

    terms: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    batch: tuple[str, ...] = ()
    left_free: tuple[str, ...] = ()
    contracted: tuple[str, ...] = ()
    right_free: tuple[str, ...] = ()
    sizes: Mapping[str, int] | None = None  # static sizes of grouped labels, when a Reshape is needed

    @property
    def needs_reshape(self) -> bool:
        return len(self.terms) == 2 and not (len(self.left_free) == 1 and len(self.contracted) == 1 and len(self.right_free) == 1)


def _expand_einsum(equation: str, ranks: Sequence[int | None]) -> tuple[list[list[str]], list[str]] | str:
    """Labels per operand and for the output, with ``...`` expanded into named labels."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    raw_terms = lhs.split(",")
    if len(raw_terms) != len(ranks):
        return f"the equation has {len(raw_terms)} operands, the node {len(ranks)}"
    ellipsis_counts: list[int] = []
    for raw, rank in zip(raw_terms, ranks):
        if raw.count("...") > 1 or "." in raw.replace("...", ""):
            return f"malformed term {raw!r}"
        if "..." in raw:
            if rank is None:
                return "an operand with '...' has unknown rank"
            ellipsis_counts.append(rank - (len(raw) - 3))
            if ellipsis_counts[-1] < 0:
                return f"term {raw!r} has more labels than its operand's rank {rank}"
        elif rank is not None and rank != len(raw):
            return f"term {raw!r} does not match its operand's rank {rank}"
    width = max(ellipsis_counts, default=0)
    ellipsis = [f"…{k}" for k in range(width)]
    terms = []
    for raw, rank in zip(raw_terms, ranks):
        if "..." in raw:
            before, after = raw.split("...")
            count = (rank or 0) - len(before) - len(after)
            terms.append(list(before) + ellipsis[width - count :] + list(after))
        else:
            terms.append(list(raw))
    if arrow:
        if rhs.count("...") > 1:
            return f"malformed output {rhs!r}"
        before, _, after = rhs.partition("...")
        output = list(before) + (ellipsis if "..." in rhs else []) + list(after)
    else:
        counts: dict[str, int] = {}
        for term in terms:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        output = ellipsis + sorted(label for label, n in counts.items() if n == 1 and not label.startswith("…"))
    return terms, output


def einsum_plan(node: gs.Node) -> EinsumPlan | str:
    """How ``einsum_to_matmul`` rewrites this Einsum, or the reason it cannot."""
    if node.op != "Einsum" or "equation" not in node.attrs:
        return "not an Einsum"
    equation = node.attrs["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    ranks = [len(t.shape) if t.shape is not None else None for t in node.inputs]
    expanded = _expand_einsum(equation, ranks)
    if isinstance(expanded, str):
        return expanded
    terms, output = expanded
    for term in terms:
        if len(set(term)) != len(term):
            return "a label repeats within one operand (diagonal)"
    if len(set(output)) != len(output) or any(all(label not in t for t in terms) for label in output):
        return "the output has repeated labels or labels no operand has"
    if len(terms) == 1:
        if sorted(terms[0]) != sorted(output):
            return "a one-operand Einsum that sums over labels (ReduceSum), not a permutation"
        return EinsumPlan(terms=(tuple(terms[0]),), output=tuple(output))
    if len(terms) != 2:
        return f"{len(terms)} operands (only one or two are rewritten)"
    left, right = terms
    for label in (*left, *right):
        if label not in output and (label in left) != (label in right):
            return f"label {label!r} is summed within one operand (needs a ReduceSum first)"
    plan = EinsumPlan(
        terms=(tuple(left), tuple(right)),
        output=tuple(output),
        batch=tuple(label for label in output if label in left and label in right),
        left_free=tuple(label for label in left if label not in right),
        contracted=tuple(label for label in left if label in right and label not in output),
        right_free=tuple(label for label in right if label not in left),
    )
    if not plan.needs_reshape:
        return plan
    sizes: dict[str, int] = {}
    for term, tensor in zip(terms, node.inputs):
        for label, dim in zip(term, tensor.shape or []):
            if label in (*plan.left_free, *plan.contracted, *plan.right_free):
                value = known_dim(dim)
                if not isinstance(value, int):
                    return f"label {label!r} is grouped by a Reshape and needs a static size"
                sizes[label] = value
    return dataclasses.replace(plan, sizes=sizes)


def _chain(graph: gs.Graph, names: Names, base: str, op: str, inputs: list[gs.Tensor], attrs: Mapping[str, Any]) -> gs.Variable:
    output = gs.Variable(names(f"{base}/{op.lower()}_out"))
    graph.nodes.append(gs.Node(op=op, name=names(f"{base}/{op}"), attrs=dict(attrs), inputs=inputs, outputs=[output]))
    return output


def _rewrite_einsum(graph: gs.Graph, node: gs.Node, plan: EinsumPlan, names: Names) -> None:
    base, result = node.name or "einsum", node.outputs[0]
    inputs = list(node.inputs)
    node.inputs.clear()
    node.outputs.clear()
    if len(plan.terms) == 1:
        perm = [plan.terms[0].index(label) for label in plan.output]
        graph.nodes.append(gs.Node("Transpose", names(f"{base}/Transpose"), {"perm": perm}, inputs, [result]))
        return
    left, right = inputs
    batch = list(plan.batch)
    left_order = batch + list(plan.left_free) + list(plan.contracted)
    right_order = batch + list(plan.contracted) + list(plan.right_free)
    operands = []
    for tensor, term, order in ((left, plan.terms[0], left_order), (right, plan.terms[1], right_order)):
        perm = [term.index(label) for label in order]
        if perm != list(range(len(perm))):
            tensor = _chain(graph, names, base, "Transpose", [tensor], {"perm": perm})
        operands.append(tensor)
    sizes = plan.sizes or {}
    if plan.needs_reshape:
        rows = math.prod(sizes[label] for label in plan.left_free)
        inner = math.prod(sizes[label] for label in plan.contracted)
        columns = math.prod(sizes[label] for label in plan.right_free)
        zeros = [0] * len(batch)
        for index, target in ((0, [*zeros, rows, inner]), (1, [*zeros, inner, columns])):
            shape = gs.Constant(names(f"{base}/shape{index}"), np.array(target, dtype=np.int64))
            operands[index] = _chain(graph, names, base, "Reshape", [operands[index], shape], {})
    product = _chain(graph, names, base, "MatMul", operands, {})
    current = batch + list(plan.left_free) + list(plan.right_free)
    if plan.needs_reshape:
        target = [0] * len(batch) + [sizes[label] for label in (*plan.left_free, *plan.right_free)]
        shape = gs.Constant(names(f"{base}/shape_out"), np.array(target, dtype=np.int64))
        product = _chain(graph, names, base, "Reshape", [product, shape], {})
    perm = [current.index(label) for label in plan.output]
    if perm != list(range(len(perm))):
        product = _chain(graph, names, base, "Transpose", [product], {"perm": perm})
    last = product.inputs[0]
    last.outputs[0] = result


def einsum_to_matmul(graph: gs.Graph) -> int:
    """Rewrite one- and two-operand ``Einsum`` into ``Transpose``/``Reshape``/``MatMul``.

    Before::

        q [b,h,i,d], k [b,h,j,d] --Einsum("bhid,bhjd->bhij")--> s

    After::

        k --Transpose(0,1,3,2)--> kT;  q, kT --MatMul--> s [b,h,i,j]

    Labels in both operands and the output are batch dims (MatMul broadcasts
    them), labels in both operands only are contracted, the rest are free;
    ``...`` is expanded from the operands' ranks. More than one free or
    contracted label per side is grouped with a Reshape (needs static sizes).
    A one-operand permutation becomes a Transpose. Left as Einsum (and
    reported by ``check``): diagonals, sums within one operand, 3+ operands.
    """
    names = Names(graph)
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "Einsum" or node.domain not in (None, *STANDARD_DOMAINS):
            continue
        plan = einsum_plan(node)
        if isinstance(plan, EinsumPlan):
            _rewrite_einsum(graph, node, plan, names)
            rewritten += 1
    if rewritten:
        graph.cleanup().toposort()
    return rewritten
