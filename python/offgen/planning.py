"""offgen.plan: the planner of ``offgen plan`` (batch sizes, tier shares and overlap for a
workload within memory limits, with the cost model's predicted figures)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from . import _core
from .errors import ConfigError
from .params import _INT32_MAX, POLICY_FIELDS, Policy, _int, _str


@dataclass
class Plan:
    policy: Policy  # the chosen policy (pass it to LLM(policy=...))
    toml: str  # the same as TOML (what `offgen plan` prints)
    batch_size: int  # sequences per block
    kv_slots: int  # KV table capacity per sequence
    prefill_throughput: float  # predicted tokens/s (FlexGen's definitions)
    decode_throughput: float
    total_throughput: float
    prefill_seconds: float
    decode_seconds: float
    bottleneck: str  # the busiest decode lane: load, compute or store
    binding: str  # why not bigger: a tier capacity, the request count, ...
    need_bytes: Dict[str, int]  # device, host, disk
    evaluated: int  # candidate policies predicted
    model_key: str


def plan(
    model: str,
    prompt_len: int,
    gen_len: int,
    num_requests: int = 0,
    policy: Union[None, str, Policy] = None,
    weight_dtype: str = "native",
    threads: int = 0,
    max_batch: int = 4096,
    profile: Optional[str] = None,
    **policy_fields: Any,
) -> Plan:
    """Plans a workload of ``num_requests`` (0 = unbounded) prompts of ``prompt_len`` tokens
    generating ``gen_len``, as ``offgen plan`` does. Capacities (``gpu_mem``, ``cpu_mem``,
    ``disk_mem``), the KV policy and the offload dir come from ``policy`` and the keywords (any
    Policy field). The hardware profile is the cache's (``profile``: another file), measured
    first when absent (a minute or so)."""
    unknown = sorted(set(policy_fields) - set(POLICY_FIELDS))
    if unknown:
        raise ConfigError(f"unknown policy field(s) {', '.join(unknown)}")
    if policy is None:
        base = Policy()
    elif isinstance(policy, Policy):
        base = policy
    else:
        base = Policy.from_toml(_str(policy, "policy", path=True))
    base = base.replace(**policy_fields)
    a = _core.plan(
        model=_str(model, "model", path=True), weight_dtype=_str(weight_dtype, "weight_dtype"),
        threads=_int(threads, "threads", 0, _INT32_MAX),
        profile="" if profile is None else _str(profile, "profile", path=True),
        base=base._resolve_core(), prompt_len=_int(prompt_len, "prompt_len"),
        gen_len=_int(gen_len, "gen_len"), num_requests=_int(num_requests, "num_requests"),
        max_batch=_int(max_batch, "max_batch"),
    )
    return Plan(
        policy=Policy._from_core(a.policy), toml=a.policy.toml(), batch_size=a.batch_size,
        kv_slots=a.kv_slots, prefill_throughput=a.prefill_throughput,
        decode_throughput=a.decode_throughput, total_throughput=a.total_throughput,
        prefill_seconds=a.prefill_seconds, decode_seconds=a.decode_seconds,
        bottleneck=a.bottleneck, binding=a.binding, need_bytes=dict(a.need_bytes),
        evaluated=a.evaluated, model_key=a.model_key,
    )
