"""The pieces every op's sharding rule is written with (the rules themselves live next to each op).

An op's `Partition` has two parts:
- `rule(*avals, **params) -> (einsum, kwargs)`: the Shardy `sharding_rule` string (with its
  `reduction_factors`, `need_replication_factors` and factor sizes), which drives propagation.
- `plan(layout, *avals, **params) -> Plan`: given the shardings the partitioner proposes (read
  through `Layout`), the shardings the op accepts for its operands and results, and the per-shard
  body (which runs the same math on the local blocks and `psum`s over a sharded contraction).
  The partitioner reshards operands to what the plan asks for. The same plan also gives the
  output shardings at trace time for meshes with Explicit axes.

Scale tensors follow their operands: an axis quantized in 128-wide groups (K of 1x128 scales,
N and K of 128x128 scales) may only shard where every shard holds whole groups, i.e. a multiple of
128 elements per shard; otherwise that axis is replicated (the partitioner all-gathers it) rather
than splitting a scale group across devices.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
from jax._src import sharding_impls
from jax.sharding import NamedSharding, PartitionSpec as P

from .reference import GROUP

Axes = tuple  # mesh axis names sharding one array dimension, major to minor; () = replicated


@dataclasses.dataclass(frozen=True)
class Plan:
    in_specs: tuple  # one PartitionSpec per operand
    out_specs: tuple  # one PartitionSpec per result
    # local(run, *blocks) -> per-shard results; run(*blocks, **param_overrides) is the op's own
    # single-device implementation (kernel or reference) with the primitive's params.
    local: Callable


@dataclasses.dataclass(frozen=True)
class Partition:
    rule: Callable
    plan: Callable


def _axes(entry) -> Axes:
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def spec(*dims: Axes) -> P:
    """PartitionSpec from per-dimension axis tuples."""
    return P(*[None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims])


def spec_of(sharding, ndim: int, mesh=None) -> tuple[Axes, ...]:
    """Per-dimension axis tuples of a sharding.

    The partitioner hands custom_partitioning HLO shardings; jax's own decoding into mesh axes
    raises on shardings it cannot name (Shardy may split a mesh axis into sub-axes across the
    factors of a compound dimension), which would fail the whole compilation. So the op asks for
    undecoded shardings and decodes here: a sharding that does not decode exactly reads as
    replicated (the plan then replicates that operand: correct, maybe not the cheapest)."""
    if not isinstance(sharding, NamedSharding):
        hlo = getattr(sharding, "_hlo_sharding", None)
        if mesh is None or hlo is None:
            return ((),) * ndim
        try:
            parsed = sharding_impls.parse_flatten_op_sharding(hlo, mesh)[0]
            named = NamedSharding(mesh, P(*parsed, *((None,) * (ndim - len(parsed)))))
            if named._to_xla_hlo_sharding(ndim) != hlo:
                return ((),) * ndim
        except Exception:  # noqa: BLE001 - anything undecodable is treated as replicated
            return ((),) * ndim
        sharding = named
    entries = tuple(sharding.spec) + (None,) * (ndim - len(sharding.spec))
    return tuple(_axes(e) for e in entries[:ndim])


class Layout:
    """The shardings proposed for one call, and the mesh axes already given to a dimension.

    `take(i, dim, size)` claims the axes that shard dimension `dim` of operand `i` when that
    sharding is usable: the axes exist, are not used by another dimension of the op, split
    `size` evenly, and leave a multiple of `multiple` elements per shard. Otherwise it returns ()
    (that dimension is replicated). The order of `take` calls is the op's priority.
    """

    def __init__(self, axis_sizes: dict, operands: Sequence[tuple], results: Sequence[tuple] | None):
        self.axis_sizes = dict(axis_sizes)
        self.operands = list(operands)
        self.results = list(results) if results is not None else None
        self.used: set = set()

    def count(self, axes: Axes) -> int:
        n = 1
        for a in axes:
            n *= self.axis_sizes[a]
        return n

    def _claim(self, axes: Axes, size: int, multiple: int) -> Axes:
        if not axes or any(a not in self.axis_sizes or a in self.used for a in axes):
            return ()
        if len(set(axes)) != len(axes):
            return ()
        n = self.count(axes)
        if size % n or (size // n) % multiple:
            return ()
        self.used.update(axes)
        return tuple(axes)

    def take(self, i: int, dim: int, size: int, multiple: int = 1) -> Axes:
        return self._claim(self.operands[i][dim], size, multiple)

    def take_result(self, i: int, dim: int, size: int, multiple: int = 1) -> Axes:
        if self.results is None:
            return ()
        return self._claim(self.results[i][dim], size, multiple)

    def first(self, *candidates: tuple) -> Axes:
        """The first usable of several (operand, dim, size[, multiple]) proposals."""
        for c in candidates:
            got = self.take(*c)
            if got:
                return got
        return ()


class Rule:
    """Builds a Shardy sharding rule. `blocked(name, size)` gives the factors of an axis quantized
    in 128-wide groups and of its scale axis: `(nameb nameg)` / `nameb` with nameg = 128 and never
    sharded, so a sharding of the data axis is a sharding of whole scale groups; an axis that is
    not a multiple of 128, or is a single group, cannot shard at all."""

    def __init__(self):
        self.sizes: dict = {}
        self.need_replication: list = []
        self.reduction: list = []

    def blocked(self, name: str, size: int) -> tuple[str, str]:
        # Shardy rejects a size-1 factor inside a compound one; one group cannot shard anyway.
        if size % GROUP == 0 and size >= 2 * GROUP:
            self.sizes[f"{name}g"] = GROUP
            self.need_replication.append(f"{name}g")
            return f"({name}b {name}g)", f"{name}b"
        self.need_replication += [name, f"{name}b"]
        return name, f"{name}b"

    def fixed(self, name: str) -> str:
        self.need_replication.append(name)
        return name

    def reduce(self, *names: str) -> None:
        self.reduction += list(names)

    def build(self, operands: Sequence[Sequence[str]], results: Sequence[Sequence[str]]):
        text = (", ".join(" ".join(o) for o in operands) + " -> "
                + ", ".join(" ".join(r) for r in results))
        # Shardy wants special factors listed in factor order (order of first appearance).
        order = {f: i for i, f in enumerate(dict.fromkeys(
            text.replace("(", " ").replace(")", " ").replace(",", " ").replace("->", " ").split()))}
        ordered = lambda names: tuple(sorted(dict.fromkeys(names), key=order.__getitem__))
        kwargs = dict(self.sizes)
        reduction = [f for f in self.reduction if f not in self.need_replication]  # unshardable
        if reduction:
            kwargs["reduction_factors"] = ordered(reduction)
        if self.need_replication:
            kwargs["need_replication_factors"] = ordered(self.need_replication)
        return text, kwargs


def leading(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def shard_index(axes: Axes):
    """Index of this shard along `axes` (0 when replicated)."""
    return jax.lax.axis_index(axes) if axes else 0
