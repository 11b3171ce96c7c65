"""offgen.ray: offline batch generation over a Ray Data dataset, on one machine or a cluster.

    from offgen.ray import ProcessorConfig, build_processor
    proc = build_processor(ProcessorConfig(model="m.gguf", concurrency=2, batch_size=64,
                                           engine_kwargs={"threads": 1}),
                           preprocess=lambda row: {"prompt": row["question"], "qid": row["qid"]})
    proc(ray.data.read_json("in.jsonl")).write_json("out/")

Each of ``concurrency`` actors loads the model once and runs ``LLM.generate`` over batches of
``batch_size`` rows. Rows gain ``generated_text``, ``finish_reason``, ``num_generated_tokens``,
``error`` and ``error_kind`` (None, or why the row failed and the kind of failure: a bad row
never fails the job nor another row). An actor that dies is restarted by Ray and its batch
retried, so every row appears once in the output.
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
_REQUEST_KEYS = ("prompt", "messages", "context", "id", "parse_special", "tools",
                 "chat_template_kwargs")
_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))
GENERATED_COLUMNS = ("generated_text", "finish_reason", "num_generated_tokens", "error",
                     "error_kind")
# The types of the request keys: an error row holds None where its value had another (an int
# prompt), so that its column keeps one type in every batch.
_REQUEST_TYPES = {"prompt": str, "context": str, "messages": (list, tuple), "id": (str, int)}


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
    the CLI does; give one for reproducible sampled texts), ``parse_special`` (False: control
    strings in a plain prompt stay text), ``tools``, ``chat_template_kwargs`` and
    ``sampling_params`` (a dict of SamplingParams fields); its other keys are carried to the output row. Without it, the row itself
    is read that way (its ``prompt``, ``sampling_params``, ... columns). ``postprocess(row)`` sees the carried keys plus the generated columns and
    returns the output row. An exception in either, an invalid request, or a value that no table
    column can hold (a set, an object, a type other than that of the column's other rows) makes
    that row an error row, and no other."""
    return Processor(config, preprocess, postprocess)


def _strip_line(message: str) -> str:
    # The engine names a request by its line in the batch ("line 3: ..."): meaningless here.
    return re.sub(r"^line \d+: ", "", message)


class _RowError(Exception):
    """A row that is no valid request, with the error kind of its error row."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _sampling_fields(sp: Any) -> Row:
    """A row's ``sampling_params`` as request fields: SamplingParams fields only (a ``prompt`` or
    ``id`` there would replace the row's own), None values dropped (Arrow fills the fields other
    rows of the batch set with None)."""
    if sp is None:
        return {}
    if not isinstance(sp, Mapping):
        raise _RowError("wrong_type", f"field 'sampling_params': expected a dict, got "
                                      f"{type(sp).__name__}")
    given = {k: v for k, v in sp.items() if v is not None}
    unknown = sorted(set(given) - _SAMPLING_FIELDS)
    if unknown:
        raise _RowError("unknown_field", f"field 'sampling_params.{unknown[0]}': unknown field "
                                         f"(SamplingParams fields: "
                                         f"{', '.join(sorted(_SAMPLING_FIELDS))})")
    return given


def _arrow_errors() -> tuple:
    import pyarrow as pa

    return (pa.ArrowException, TypeError, ValueError, OverflowError)


def _arrow_type(v: Any) -> Any:
    """The Arrow type of `v` alone, or None when Arrow cannot store it (a set, an object)."""
    import pyarrow as pa

    try:
        return pa.array([v]).type
    except _arrow_errors():
        return None


def _storable(rows: List[Row]) -> List[Row]:
    """`rows` with every value storable in a table column: a value that is not (a set, an object,
    a value whose type differs from that of the column's other rows) makes its row an error row
    without that value, so one row fails and not its batch. A column's type is the most common
    one among the rows without an error (else among all rows)."""
    import pyarrow as pa

    errors = _arrow_errors()
    columns = list(dict.fromkeys(k for row in rows for k in row))
    for c in columns:
        values = [row.get(c) for row in rows]
        try:
            pa.array(values)
            continue
        except errors:
            pass
        types = [None if v is None else _arrow_type(v) for v in values]
        counts: Dict[Any, int] = {}
        for clean in (True, False):
            for row, t in zip(rows, types):
                if t is not None and (row.get("error") is None) == clean:
                    counts[t] = counts.get(t, 0) + 1
            if counts:
                break
        column_type = max(counts, key=counts.get) if counts else None
        for i, v in enumerate(values):
            if v is None:
                continue
            try:
                if column_type is None or types[i] is None:
                    raise TypeError
                pa.array([v], type=column_type)
            except errors:
                rows[i] = _unstorable(rows[i], c, v, column_type if types[i] else None)
    return rows


def _unstorable(row: Row, column: str, value: Any, column_type: Any) -> Row:
    kept = {k: v for k, v in row.items() if k != column}
    kept[column] = None
    if row.get("error") is not None:  # already failed: its error stays the reason
        return kept
    what = f"a value of type {type(value).__name__}"
    why = (f"{what} does not fit the column's type {column_type} (that of the other rows)"
           if column_type is not None else f"{what} cannot be stored in a table column")
    return _error_row(kept, "unstorable_value", f"column '{column}': {why}")


def _table(rows: List[Row]) -> Any:
    """The output rows as one table: every key of any row a column (None where a row lacks it;
    pyarrow's from_pylist would keep only the first row's keys)."""
    import pyarrow as pa

    rows = _storable(rows)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    return pa.Table.from_pydict({c: [row.get(c) for row in rows] for c in columns})


def _error_row(carried: Row, kind: str, message: str) -> Row:
    row = dict(carried)
    for k, types in _REQUEST_TYPES.items():
        if row.get(k) is not None and (not isinstance(row[k], types) or isinstance(row[k], bool)):
            row[k] = None
    row.update(generated_text=None, finish_reason="error", num_generated_tokens=0, error=message,
               error_kind=kind)
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
            except Exception as e:  # the user's function: any failure is this row's
                out[i] = _error_row(row, "preprocess_error", f"preprocess: {type(e).__name__}: {e}")
                continue
            kept = {k: v for k, v in pre.items() if k != "sampling_params"}
            request = {k: pre[k] for k in _REQUEST_KEYS if k in pre}
            try:
                request.update(_sampling_fields(pre.get("sampling_params")))
            except _RowError as e:
                out[i] = _error_row(kept, e.kind, str(e))
                continue
            requests.append(request)
            carried.append(kept)
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
                    out[i] = _error_row(carried[k], "request_failed", f"{type(e).__name__}: {e}")
            if results is not None:
                for k, (i, r) in enumerate(zip(where, results)):
                    if r.error is not None:
                        out[i] = _error_row(carried[k], r.error_kind or "request_failed",
                                            _strip_line(r.error))
                        continue
                    row = dict(carried[k])
                    row.update(
                        generated_text=r.outputs[0].text,
                        finish_reason=r.outputs[0].finish_reason,
                        num_generated_tokens=r.usage.completion_tokens,
                        error=None,
                        error_kind=None,
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
                    out[i] = _error_row(row, "postprocess_error",
                                        f"postprocess: {type(e).__name__}: {e}")
        table = _table(out)
        # Columns that are None in every row of this batch would be typed null: fix the types.
        types = {"generated_text": pa.string(), "finish_reason": pa.string(),
                 "num_generated_tokens": pa.int64(), "error": pa.string(),
                 "error_kind": pa.string()}
        for name, typ in types.items():
            if name in table.column_names and table.schema.field(name).type != typ:
                j = table.column_names.index(name)
                table = table.set_column(j, name, table.column(name).cast(typ))
        return table
