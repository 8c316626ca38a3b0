"""Fixed memory per device under data parallelism with ZeRO / FSDP sharding.

With ``N`` devices (``--world-size``) each holds a full copy of every activation of its
own batch (``--dim batch`` is the batch *per device*; the global batch is N times it)
and a share of the fixed memory, as the ZeRO stages divide it (Rajbhandari, Rasley,
Ruwase and He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*,
SC 2020, §5; PyTorch FSDP's ``SHARD_GRAD_OP`` = stage 2 and ``FULL_SHARD`` = stage 3).
With P parameter bytes, G gradient bytes and O optimizer-state bytes, per device:

=============  ==========================  =========================================
``--shard``    ZeRO stage                  fixed memory per device
=============  ==========================  =========================================
``none``       plain data parallel (DDP)   P + G + O
``optimizer``  1 (P_os)                    P + G + ⌈O/N⌉
``gradients``  2 (P_os+g)                  P + ⌈G/N⌉ + ⌈O/N⌉ + g_max
``parameters`` 3 (P_os+g+p), FSDP          ⌈P/N⌉ + ⌈G/N⌉ + ⌈O/N⌉ + p_max + g_max
=============  ==========================  =========================================

``⌈O/N⌉`` is rounded up per state copy (momentum, Adam's two moments): each copy is
sharded like the parameters it belongs to, so it is ``k·⌈P/N⌉`` for ``k`` copies.

``p_max`` is the largest single op's parameters, gathered in full while that op runs
(we take one op as the unit gathered at a time; FSDP's wrapping unit is often a whole
layer, and its prefetch of the next unit is not counted); ``g_max`` is that op's full
gradient, which exists before the reduce-scatter that leaves each device its share.
Communication buffers (DDP's 25 MiB buckets) are not counted. Under ``--precision amp``
the cached half weight copies are divided like the parameters at stage 3. Inputs,
constants and buffers are not sharded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.units import Fact, Phrase, to_data

__all__ = ["SHARDS", "ShardedMemory", "shard_fixed_memory", "apply_sharding"]

SHARDS = ("none", "optimizer", "gradients", "parameters")
_STAGE = {"none": 0, "optimizer": 1, "gradients": 2, "parameters": 3}
_AMP_COPIES = "half weight copies (amp)"


@dataclasses.dataclass(frozen=True)
class ShardedMemory:
    """Fixed memory per device: its parts before and after sharding, and what was gathered."""

    world_size: int
    shard: str
    stage: int
    before: dict[str, int]
    after: dict[str, int]
    gathered_parameters: int
    gathered_gradients: int

    @property
    def total(self) -> int:
        return sum(self.after.values())


def _ceil_div(x: int, n: int) -> int:
    return -(-int(x) // n)


def shard_fixed_memory(parts: dict[str, int], world_size: int, shard: str, max_op_params: int) -> ShardedMemory:
    """Divide the fixed-memory ``parts`` (as the training builder names them) over
    ``world_size`` devices under ``shard`` (see the module's table)."""
    if shard not in _STAGE:
        raise InputError(f"--shard {shard!r}: choose one of {', '.join(SHARDS)}")
    if world_size < 1:
        raise InputError(f"--world-size {world_size}: must be at least 1")
    stage = _STAGE[shard] if world_size > 1 else 0
    after: dict[str, int] = {}
    g_max = p_max = 0
    params = int(parts.get("parameters", 0))
    for key, value in parts.items():
        divide = (
            (stage >= 1 and key.startswith("optimizer state"))
            or (stage >= 2 and key == "gradients")
            or (stage >= 3 and key in ("parameters", _AMP_COPIES))
        )
        if not divide:
            after[key] = int(value)
        elif key.startswith("optimizer state") and params and value % params == 0:
            # each state copy is sharded like the parameters it belongs to: ⌈P/N⌉ per copy
            after[key] = (int(value) // params) * _ceil_div(params, world_size)
        else:
            after[key] = _ceil_div(value, world_size)
    if stage >= 2 and "gradients" in parts:
        g_max = min(int(max_op_params), int(parts["gradients"]))
        after["gathered gradients (one op)"] = g_max
    if stage >= 3:
        p_max = min(int(max_op_params), params)
        after["gathered parameters (one op)"] = p_max
    return ShardedMemory(world_size, shard, stage, dict(parts), after, p_max, g_max)


def apply_sharding(graph: Graph, world_size: int, shard: str, source: str = "") -> Graph:
    """``graph`` with its fixed memory per device under ``shard`` over ``world_size`` devices."""
    if world_size == 1 and shard == "none":
        return graph
    if "parameter_bytes" not in graph.meta or not isinstance(graph.meta.get("fixed_parts"), dict):
        raise InputError(f"{source or graph.name}: --world-size/--shard need parameter sizes, which only ONNX models state")
    parts = {str(k): int(v) for k, v in graph.meta["fixed_parts"].items()}
    if sum(parts.values()) != int(graph.fixed_mem):
        parts = {"fixed": int(graph.fixed_mem)}
    facts = shard_fixed_memory(parts, world_size, shard, int(graph.meta.get("max_op_parameter_bytes", 0) or 0))
    fixed = facts.total
    meta: dict[str, Any] = dict(graph.meta)
    meta["fixed_parts"] = facts.after
    meta["sharding"] = dataclasses.asdict(facts)
    info = dict(meta.get("info") or {})
    stage = Phrase("ZeRO stage {}", (facts.stage,)) if facts.stage else "no sharding (plain data parallel)"
    info["sharding"] = to_data(
        Phrase(
            "{} over {} devices; fixed memory per device {} (unsharded {}); --dim batch is per device",
            (stage, world_size, Fact(fixed, "byte count"), Fact(sum(parts.values()), "byte count")),
        )
    )
    after = tuple(x for k, v in facts.after.items() for x in (k, Fact(v, "byte count")))
    info["fixed memory parts"] = to_data(Phrase(", ".join("{} {}" for _ in facts.after), after))
    meta["info"] = info
    return dataclasses.replace(graph, fixed_mem=fixed, lb=int(graph.lb) - int(graph.fixed_mem) + fixed, meta=meta)
