"""offgen.ray: offline batch generation over a Ray Data dataset, on one machine or a cluster.

    from offgen.ray import ProcessorConfig, build_processor
    proc = build_processor(ProcessorConfig(model="m.gguf", concurrency=2, batch_size=64,
                                           engine_kwargs={"threads": 1}),
                           preprocess=lambda row: {"prompt": row["question"], "qid": row["qid"]})
    proc(ray.data.read_json("in.jsonl")).write_json("out/")

Each of ``concurrency`` actors loads the model once and runs ``LLM.generate`` over batches of
``batch_size`` rows. Rows gain ``generated_text``, ``finish_reason``, ``num_generated_tokens``
and ``error`` (None, or why the row failed: a bad row never fails the job). An actor that dies is
restarted by Ray and its batch retried, so every row appears once in the output.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

try:
    import ray  # noqa: F401
    import ray.data
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("offgen.ray needs Ray Data: pip install 'offgen[ray]' (ray[data])") from e

from .params import SamplingParams

Row = Dict[str, Any]

# The keys of preprocess's dict that make the request; the others are carried to the output.
_REQUEST_KEYS = ("prompt", "messages", "context", "id")
_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))
GENERATED_COLUMNS = ("generated_text", "finish_reason", "num_generated_tokens", "error")


@dataclass
class ProcessorConfig:
    """How a processor runs.

    ``model``: as ``offgen.LLM``; ``concurrency``: actors (each loads the model once);
    ``batch_size``: rows per ``generate()`` call (the engine batches within it);
    ``engine_kwargs``: ``offgen.LLM`` keyword arguments (``threads``, ``policy``, ``kv_policy``,
    ...); ``sampling_params``: the defaults of every row (a SamplingParams or a dict of its
    fields; a row's ``sampling_params`` override them); ``num_cpus``: CPUs Ray reserves per actor
    (default: ``engine_kwargs["threads"]``, else 1); ``chat``: apply the chat template to plain
    prompts.
    """

    model: str
    concurrency: int = 1
    batch_size: int = 64
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)
    sampling_params: Union[SamplingParams, Mapping[str, Any], None] = None
    num_cpus: Optional[float] = None
    chat: bool = False

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1 (got {self.concurrency})")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {self.batch_size})")
        self._sampling()  # a bad value fails here, not in every actor

    def _sampling(self) -> SamplingParams:
        sp = self.sampling_params
        if sp is None:
            return SamplingParams()
        return sp if isinstance(sp, SamplingParams) else SamplingParams(**dict(sp))

    def _actor_cpus(self) -> float:
        if self.num_cpus is not None:
            return float(self.num_cpus)
        threads = int(self.engine_kwargs.get("threads") or 0)
        return float(threads) if threads > 0 else 1.0


class Processor:
    """Applies the offgen stage to a dataset: ``processor(ds)`` returns the generated dataset
    (lazy, as every Ray Data transform)."""

    def __init__(
        self,
        config: ProcessorConfig,
        preprocess: Optional[Callable[[Row], Row]],
        postprocess: Optional[Callable[[Row], Row]],
    ) -> None:
        self.config = config
        self.preprocess = preprocess
        self.postprocess = postprocess

    def __call__(self, ds: "ray.data.Dataset") -> "ray.data.Dataset":
        c = self.config
        if ray.is_initialized():
            cpus = ray.cluster_resources().get("CPU", 0)
            if c.concurrency * c._actor_cpus() >= cpus:
                warnings.warn(
                    f"offgen.ray: {c.concurrency} actors x num_cpus {c._actor_cpus():g} reserve all "
                    f"{cpus:g} CPUs of the cluster: Ray Data's read and write tasks then never get "
                    "one and the job waits forever; give each actor a smaller num_cpus (the engine "
                    "still runs engine_kwargs['threads'] threads)",
                    stacklevel=2,
                )
        return ds.map_batches(
            _OffgenStage,
            batch_size=c.batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=c.concurrency),
            fn_constructor_kwargs={
                "config": c,
                "preprocess": self.preprocess,
                "postprocess": self.postprocess,
            },
            num_cpus=c._actor_cpus(),
        )


def build_processor(
    config: ProcessorConfig,
    preprocess: Optional[Callable[[Row], Row]] = None,
    postprocess: Optional[Callable[[Row], Row]] = None,
) -> Processor:
    """A processor over ``config``. ``preprocess(row)`` returns a dict with ``prompt`` or
    ``messages``, optionally ``context``, ``id`` (the request id: its seed is mixed with it, as
    the CLI does; give one for reproducible sampled texts) and ``sampling_params`` (a dict of
    SamplingParams fields); its other keys are carried to the output row. Without it, the row itself
    is read that way (its ``prompt``, ``sampling_params``, ... columns). ``postprocess(row)`` sees the carried keys plus the generated columns and
    returns the output row. An exception in either makes that row an error row."""
    return Processor(config, preprocess, postprocess)


def _strip_line(message: str) -> str:
    # The engine names a request by its line in the batch ("line 3: ..."): meaningless here.
    return re.sub(r"^line \d+: ", "", message)


def _sampling_fields(sp: Any) -> Row:
    """A row's ``sampling_params`` as request fields: SamplingParams fields only (a ``prompt`` or
    ``id`` there would replace the row's own), None values dropped (Arrow fills the fields other
    rows of the batch set with None)."""
    if sp is None:
        return {}
    if not isinstance(sp, Mapping):
        raise TypeError(f"sampling_params is {type(sp).__name__}, not a dict")
    given = {k: v for k, v in sp.items() if v is not None}
    unknown = sorted(set(given) - _SAMPLING_FIELDS)
    if unknown:
        raise ValueError(f"sampling_params: unknown field {unknown[0]!r} (SamplingParams fields: "
                         f"{', '.join(sorted(_SAMPLING_FIELDS))})")
    return given


def _table(rows: List[Row]) -> Any:
    """The output rows as one table: every key of any row a column (None where a row lacks it;
    pyarrow's from_pylist would keep only the first row's keys)."""
    import pyarrow as pa

    columns = list(dict.fromkeys(k for row in rows for k in row))
    return pa.Table.from_pydict({c: [row.get(c) for row in rows] for c in columns})


def _error_row(carried: Row, message: str) -> Row:
    row = dict(carried)
    row.update(generated_text=None, finish_reason="error", num_generated_tokens=0, error=message)
    return row


class _OffgenStage:
    """The actor of the map_batches stage: one LLM, loaded once."""

    def __init__(
        self,
        config: ProcessorConfig,
        preprocess: Optional[Callable[[Row], Row]],
        postprocess: Optional[Callable[[Row], Row]],
    ) -> None:
        from .llm import LLM

        self.config = config
        self.preprocess = preprocess
        self.postprocess = postprocess
        self.sampling = config._sampling()
        self.llm = LLM(config.model, **config.engine_kwargs)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        rows: List[Row] = batch.to_pylist()
        out: List[Optional[Row]] = [None] * len(rows)
        requests: List[Row] = []
        carried: List[Row] = []
        where: List[int] = []
        for i, row in enumerate(rows):
            try:
                pre = self.preprocess(dict(row)) if self.preprocess else dict(row)
                if not isinstance(pre, Mapping):
                    raise TypeError(f"preprocess returned {type(pre).__name__}, not a dict")
                request = {k: pre[k] for k in _REQUEST_KEYS if k in pre}
                request.update(_sampling_fields(pre.get("sampling_params")))
            except Exception as e:  # the user's function: any failure is this row's
                out[i] = _error_row(row, f"preprocess: {type(e).__name__}: {e}")
                continue
            requests.append(request)
            carried.append({k: v for k, v in pre.items() if k != "sampling_params"})
            where.append(i)
        if requests:
            try:
                results = self.llm.generate(
                    requests, self.sampling, chat=self.config.chat, use_tqdm=False,
                    on_error="return",
                )
            except Exception as e:  # the engine stopped (a fault of the machine): every row
                results = None
                for k, i in enumerate(where):
                    out[i] = _error_row(carried[k], f"{type(e).__name__}: {e}")
            if results is not None:
                for k, (i, r) in enumerate(zip(where, results)):
                    if r.error is not None:
                        out[i] = _error_row(carried[k], _strip_line(r.error))
                        continue
                    row = dict(carried[k])
                    row.update(
                        generated_text=r.outputs[0].text,
                        finish_reason=r.outputs[0].finish_reason,
                        num_generated_tokens=r.usage.completion_tokens,
                        error=None,
                    )
                    out[i] = row
        if self.postprocess:
            for i, row in enumerate(out):
                try:
                    post = self.postprocess(dict(row))
                    if not isinstance(post, Mapping):
                        raise TypeError(f"postprocess returned {type(post).__name__}, not a dict")
                    out[i] = dict(post)
                except Exception as e:
                    out[i] = _error_row(row, f"postprocess: {type(e).__name__}: {e}")
        table = _table(out)
        # Columns that are None in every row of this batch would be typed null: fix the types.
        types = {"generated_text": pa.string(), "finish_reason": pa.string(),
                 "num_generated_tokens": pa.int64(), "error": pa.string()}
        for name, typ in types.items():
            if name in table.column_names and table.schema.field(name).type != typ:
                j = table.column_names.index(name)
                table = table.set_column(j, name, table.column(name).cast(typ))
        return table
