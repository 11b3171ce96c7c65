"""SamplingParams and Policy: the sampling flags and the policy flags of ``offgen generate``."""

from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from . import _core
from .errors import ConfigError

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
_INT32_MAX = (1 << 31) - 1


@dataclass
class SamplingParams:
    """How to sample each completion: the CLI's sampling flags, with its defaults.

    ``seed`` plays the part of ``--seed``: each request's own seed is ``seed`` (0 when None) mixed
    with its id, unless the request gives ``"seed"`` itself. ``stop`` is one string or a list.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 128
    seed: Optional[int] = None
    stop: Union[str, Sequence[str], None] = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        self._to_core()  # raises ConfigError for a bad value

    def _to_core(self) -> _core.SamplingParams:
        p = _core.SamplingParams()
        try:
            p.max_tokens = _int(self.max_tokens, "max_tokens", 0)
            p.temperature = _float(self.temperature, "temperature")
            p.top_p = _float(self.top_p, "top_p")
            p.top_k = _int(self.top_k, "top_k", 0)
            p.seed = 0 if self.seed is None else _int(self.seed, "seed", 0, _UINT64_MAX)
            stop = self.stop
            if not (stop is None or isinstance(stop, str) or (
                    isinstance(stop, (list, tuple)) and all(isinstance(x, str) for x in stop))):
                raise ConfigError(f"stop must be a string or a list of strings (got {stop!r})")
            p.stop = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
            p.ignore_eos = _bool(self.ignore_eos, "ignore_eos")
        except (TypeError, OverflowError) as e:
            raise ConfigError(f"SamplingParams: {e}") from None
        p.validate()
        return p


def _int(v: Any, name: str, lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> int:
    """`v` as an int in [lo, hi] (the C++ field's range), else a ConfigError naming `name`."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):  # numpy integers too
        raise ConfigError(f"{name} must be an integer (got {v!r})")
    v = int(v)
    if not lo <= v <= hi:
        raise ConfigError(f"{name} must be an integer in [{lo}, {hi}] (got {v})")
    return v


def _float(v: Any, name: str) -> float:
    # A real number: not a string ("0.5" would parse) nor a bool (a number to Python).
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ConfigError(f"{name} must be a number (got {v!r})")
    return float(v)


def _items(v: Any, name: str) -> list:
    """The items of a list-like `v` (not a string), else a ConfigError naming `name`."""
    if not isinstance(v, (str, bytes)):
        try:
            return list(v)
        except TypeError:
            pass
    raise ConfigError(f"{name} must be a list (got {v!r})")


def _str(v: Any, name: str, path: bool = False) -> str:
    """`v` as a string (or, with `path`, an os.PathLike), else a ConfigError naming `name`."""
    if isinstance(v, str) or (path and isinstance(v, os.PathLike)):
        return os.fspath(v)
    raise ConfigError(f"{name} must be a {'path' if path else 'string'} (got {v!r})")


def _bool(v: Any, name: str) -> bool:
    # bool("no") is True: only True and False are flags.
    if not isinstance(v, bool):
        raise ConfigError(f"{name} must be True or False (got {v!r})")
    return v


_SIZE_FIELDS = ("gpu_mem", "cpu_mem", "disk_mem")


@dataclass
class Policy:
    """A placement policy: the policy flags of ``offgen generate`` (None = not given).

    ``file`` is a policy TOML file read first; the other fields override it, as the flags do.
    ``percent`` is FlexGen's six numbers (WG WC CG CC HG HC); sizes take an int (bytes) or a
    string with a unit ("8G"); ``kv_budget`` a fraction in (0, 1] or a token count;
    ``kv_dtype`` what the KV cache is stored as (``f32``, ``bf16``, ``f16``, ``q8_0``, ``q4g64``;
    ``auto`` lets the planner choose with ``policy="auto"``; None = the backend's 16-bit default).
    ``compress_cache=True`` is FlexGen's name for ``kv_dtype="q4g64"``.
    """

    file: Optional[str] = None
    percent: Optional[Sequence[float]] = None
    gpu_batch_size: Optional[int] = None
    num_gpu_batches: Optional[int] = None
    overlap: Optional[bool] = None
    cpu_cache_compute: Optional[bool] = None
    compress_weight: Optional[bool] = None
    compress_cache: Optional[bool] = None
    kv_dtype: Optional[str] = None
    offload_dir: Optional[str] = None
    io_queue_depth: Optional[int] = None
    gpu_mem: Union[int, str, None] = None
    cpu_mem: Union[int, str, None] = None
    disk_mem: Union[int, str, None] = None
    kv_policy: Optional[str] = None
    kv_budget: Optional[float] = None

    @classmethod
    def from_toml(cls, path: Union[str, os.PathLike]) -> "Policy":
        """The policy of a TOML file (as ``--policy FILE``)."""
        return cls(file=os.fspath(path))

    def replace(self, **fields: Any) -> "Policy":
        """A copy with the given fields replaced (None fields of `fields` are ignored)."""
        return dataclasses.replace(self, **{k: v for k, v in fields.items() if v is not None})

    def resolve(self) -> "Policy":
        """Every field's value after the file and the overrides are applied, validated."""
        return Policy._from_core(self._resolve_core())

    def to_toml(self) -> str:
        """The resolved policy as TOML (what ``offgen plan`` prints; ``--policy`` reads it)."""
        return self._resolve_core().toml()

    def _overrides(self) -> _core.PolicyOverrides:
        o = _core.PolicyOverrides()
        try:
            if self.file is not None:
                if self.file == "auto":
                    raise ConfigError("Policy(file='auto'): pass policy='auto' to LLM instead")
                o.file = _str(self.file, "file", path=True)
            if self.percent is not None:
                o.percent = [_float(x, "percent") for x in _items(self.percent, "percent")]
            for name in ("gpu_batch_size", "num_gpu_batches", "io_queue_depth"):
                v = getattr(self, name)
                if v is not None:
                    hi = _INT32_MAX if name == "io_queue_depth" else _INT64_MAX
                    setattr(o, name, _int(v, name, 1, hi))
            for name in ("overlap", "cpu_cache_compute", "compress_weight", "compress_cache"):
                v = getattr(self, name)
                if v is not None:
                    setattr(o, name, _bool(v, name))
            if self.offload_dir is not None:
                o.offload_dir = _str(self.offload_dir, "offload_dir", path=True)
            for name in _SIZE_FIELDS:
                v = getattr(self, name)
                if v is not None:
                    setattr(o, name, str(_int(v, name, 0)) if not isinstance(v, str) else v)
            if self.kv_policy is not None:
                o.kv_policy = _str(self.kv_policy, "kv_policy")
            if self.kv_dtype is not None:
                o.kv_dtype = _str(self.kv_dtype, "kv_dtype")
            if self.kv_budget is not None:
                o.kv_budget = _float(self.kv_budget, "kv_budget")
        except (TypeError, ValueError, OverflowError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"Policy: {e}") from None
        return o

    def _resolve_core(self) -> Any:
        return self._overrides().resolve()

    @staticmethod
    def _from_core(p: Any) -> "Policy":
        return Policy(
            percent=tuple(p.percent),
            gpu_batch_size=p.gpu_batch_size if p.batch_given else None,
            num_gpu_batches=p.num_gpu_batches if p.batch_given else None,
            overlap=p.overlap,
            cpu_cache_compute=p.cpu_cache_compute,
            compress_weight=p.compress_weight,
            kv_dtype=p.kv_dtype,
            offload_dir=p.offload_dir or None,
            io_queue_depth=p.io_queue_depth,
            gpu_mem=p.gpu_mem or None,
            cpu_mem=p.cpu_mem or None,
            disk_mem=p.disk_mem or None,
            kv_policy=p.kv_policy,
            kv_budget=p.kv_budget,
        )


POLICY_FIELDS = tuple(f.name for f in dataclasses.fields(Policy) if f.name != "file")
