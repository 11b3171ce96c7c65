"""offgen.LLM: a model loaded once, generating completions for batches of requests.

Requests are read exactly as ``offgen generate`` reads the lines of its input file: a list of
prompts is the JSONL file with one request per line, so the same requests, flags and seeds give
the same texts. A request without an ``"id"`` gets the CLI's default id ``line-N`` (N = its
1-based position in the list), and its seed is ``SamplingParams.seed`` mixed with that id.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _core
from .errors import ConfigError, InputError, _for_kind
from .params import _INT32_MAX, POLICY_FIELDS, Policy, SamplingParams, _bool, _int, _str

Prompt = Union[str, Mapping[str, Any]]
Message = Mapping[str, str]


@dataclass
class CompletionOutput:
    """One completion of a request (offgen generates one per request: index 0)."""

    index: int
    text: str
    token_ids: List[int]
    finish_reason: str  # "stop", "length", or "error" (see RequestOutput.error)


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class RequestOutput:
    """The outcome of one request, in input order."""

    request_id: Union[str, int]  # the request's id as given (an int stays an int), or line-N
    prompt: Optional[str]  # the prompt text (None for a chat conversation)
    outputs: List[CompletionOutput]
    usage: Usage
    error: Optional[str] = None  # why the request failed (outputs[0].finish_reason == "error")
    error_kind: Optional[str] = None  # as in the CLI's error records: invalid_value, ...
    error_field: Optional[str] = None

    @property
    def finished(self) -> bool:
        return self.error is None


_ENGINE_OPTIONS = ("weight_dtype", "max_context", "prefill_chunk")


class LLM:
    """A model loaded once (``offgen generate``'s engine) that generates for batches of requests.

    ``model``: a .gguf file, a Hugging Face checkpoint directory, or ``dummy:PRESET``.
    ``policy``: None (the defaults), ``"auto"`` (the planner chooses batch sizes, tier shares and
    overlap for the first ``generate()`` call's requests), a policy TOML file, or a ``Policy``.
    ``kv_policy``/``kv_budget`` and any other ``Policy`` field given as a keyword (``kv_dtype=``
    among them: the KV cache's storage, ``bf16`` by default on the CPU) override it,
    as the CLI's flags override ``--policy``; so do the engine options ``weight_dtype`` (``native``
    by default: each tensor in the file's own format; ``f32``, ``bf16``, ``q8_0``, ... convert),
    ``max_context`` and ``prefill_chunk`` (0 = the defaults).
    ``threads=0`` uses every core.
    """

    def __init__(
        self,
        model: str,
        policy: Union[None, str, Policy] = None,
        kv_policy: Optional[str] = None,
        kv_budget: Optional[float] = None,
        backend: str = "cpu",
        threads: int = 0,
        **options: Any,
    ) -> None:
        unknown = sorted(set(options) - set(POLICY_FIELDS) - set(_ENGINE_OPTIONS))
        if unknown:
            raise ConfigError(
                f"unknown engine option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                f"(expected {', '.join(_ENGINE_OPTIONS + POLICY_FIELDS)})"
            )
        self.model = _model_path(model)
        self._auto = isinstance(policy, str) and policy == "auto"
        if policy is None or self._auto:
            base = Policy()
        elif isinstance(policy, Policy):
            base = policy
        elif isinstance(policy, str) or hasattr(policy, "__fspath__"):
            base = Policy.from_toml(policy)
        else:
            raise ConfigError(f"policy must be None, 'auto', a TOML file or a Policy (got {policy!r})")
        fields = {k: v for k, v in options.items() if k in POLICY_FIELDS}
        self.policy = base.replace(kv_policy=kv_policy, kv_budget=kv_budget, **fields)
        if not isinstance(backend, str) or backend not in ("cpu", "cuda", "cpu-emulated-device"):
            raise ConfigError(f"backend must be 'cpu' or 'cuda' (got {backend!r})")
        if self._auto and backend != "cpu":
            raise ConfigError(
                "--policy auto plans with the CPU backend's calibrated profile; on --backend "
                f"{backend} give the placement (percent, gpu_batch_size, ...) yourself"
            )
        self.backend = backend
        self.threads = _int(threads, "threads", 0, _INT32_MAX)
        self.weight_dtype = _str(options.get("weight_dtype") or "native", "weight_dtype")
        self.max_context = _int(options.get("max_context") or 0, "max_context", 0)
        self.prefill_chunk = _int(options.get("prefill_chunk") or 0, "prefill_chunk", 0)
        self._resolved = self.policy._resolve_core()  # ConfigError now rather than later
        self._engine: Optional[Any] = None
        if not self._auto:
            self._engine = self._make_engine(self._resolved)

    def _make_engine(self, policy: Any) -> Any:
        return _core.Engine(
            model=self.model,
            backend=self.backend,
            threads=self.threads,
            weight_dtype=self.weight_dtype,
            policy=policy,
            max_context=self.max_context,
            prefill_chunk=self.prefill_chunk,
        )

    def generate(
        self,
        prompts: Union[Prompt, Sequence[Prompt]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        context: Optional[str] = None,
        chat: bool = False,
        use_tqdm: Optional[bool] = None,
        on_error: str = "raise",
    ) -> List[RequestOutput]:
        """Completes every request; returns their outputs in input order.

        A request is a prompt string or a dict with the fields of a request line of the CLI's
        input (``"prompt"`` or ``"messages"``, optional ``"id"``, ``"context"``, ``"chat"``,
        ``"parse_special"`` (False: control-token strings in a plain prompt stay text; message
        content always does), ``"tools"``, ``"chat_template_kwargs"`` and per-request sampling
        values such as ``"max_tokens"``, ``"temperature"``, ``"seed"``).
        ``sampling_params``: one for every request, or one per request. ``context``: a shared
        context for every request without its own (``--context``). ``chat``: apply the model's
        chat template to plain prompts (``--chat``). ``use_tqdm``: a progress bar (None: when stderr is
        a terminal; True: always; False: never). ``on_error``: ``"raise"`` raises the first failed request's error
        (InputError, or ResourceError when its KV cache does not fit); ``"return"`` returns it
        as that request's output (``finish_reason == "error"``, ``.error`` set).
        """
        items = _as_list(prompts)
        if not isinstance(on_error, str) or on_error not in ("raise", "return"):
            raise ConfigError(f"on_error must be 'raise' or 'return' (got {on_error!r})")
        if context is not None:
            context = _str(context, "context")
        chat = _bool(chat, "chat")
        if use_tqdm is not None:
            use_tqdm = _bool(use_tqdm, "use_tqdm")
        lines, texts, faults = _request_lines(items, context)
        defaults = _defaults(sampling_params, len(items))
        if not items:
            return []
        engine = self._engine
        if engine is None:  # policy="auto": planned for the first call with a valid request
            policy, planned = _core.plan_job(
                self.model, self.weight_dtype, self.threads, self._resolved, lines, defaults,
                chat, self.max_context,
            )
            # No valid request: an engine reports each one's error, and the plan waits for a call
            # with something to plan for.
            engine = self._make_engine(policy)
            if planned:
                self._engine = engine
        bar = _ProgressBar(len(items)) if _want_bar(use_tqdm) else None
        try:
            outs = engine.generate(
                lines, defaults, chat, bar.update if bar else None,
                threading.current_thread() is threading.main_thread(),
            )
        finally:
            if bar:
                bar.close()
        results = [_request_output(o, t, faults.get(i), i + 1)
                   for i, (o, t) in enumerate(zip(outs, texts))]
        if on_error == "raise":
            for r in results:
                if r.error is not None:
                    failed = sum(x.error is not None for x in results)
                    more = f" ({failed - 1} more failed)" if failed > 1 else ""
                    raise _for_kind(r.error_kind or "")(
                        f"request '{r.request_id}': {r.error}{more}")
        return results

    def chat(
        self,
        messages: Union[Sequence[Message], Sequence[Sequence[Message]]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        **kwargs: Any,
    ) -> List[RequestOutput]:
        """Completes conversations (lists of ``{"role", "content"}``) with the chat template.

        ``messages``: one conversation, or a list of them. Other arguments as ``generate()``.
        """
        if isinstance(messages, (str, bytes, Mapping)):
            raise InputError("messages must be a conversation (a list of {'role', 'content'} "
                             f"dicts) or a list of them (got {type(messages).__name__})")
        messages = list(messages)
        convs = [messages] if messages and isinstance(messages[0], Mapping) else messages
        for c in convs:
            if isinstance(c, (str, bytes, Mapping)):
                raise InputError("messages must be a conversation (a list of {'role', 'content'} "
                                 f"dicts) or a list of them (got a list of {type(c).__name__})")
        return self.generate([{"messages": list(c)} for c in convs], sampling_params, **kwargs)

    @property
    def stats(self) -> Dict[str, Any]:
        """The last generate() call's figures (tokens, seconds), as the CLI's report counts them."""
        return self._engine.stats() if self._engine is not None else {}

    @property
    def resolved_policy(self) -> Policy:
        """The policy in use (after the planner, for policy="auto", once generate() ran)."""
        return Policy._from_core(self._engine.policy if self._engine else self._resolved)


def _as_list(prompts: Any) -> List[Any]:
    if isinstance(prompts, (str, Mapping)):
        return [prompts]
    try:
        return list(prompts)
    except TypeError:
        raise InputError(f"prompts must be a string, a dict or a list of them (got {prompts!r})") from None


def _model_path(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    raise ConfigError(f"model must be a path or 'dummy:PRESET' (got {model!r})")


def _jsonable(v: Any) -> Any:
    # numpy scalars and arrays (Ray and pandas rows hold them)
    if hasattr(v, "tolist"):
        return v.tolist()
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


# A request whose dict has no JSON form: (kind, field, message) as the CLI's error records.
Fault = tuple


def _json_fault(v: Any, path: str) -> Optional[Fault]:
    """Why `v` (at `path`) has no JSON form, or None: a value of a type JSON lacks (bytes, a set,
    an object) is wrong_type, a float that is not finite (JSON has no NaN) invalid_value."""
    if v is None or isinstance(v, (str, bool, int)):
        return None
    if isinstance(v, float):
        if math.isfinite(v):
            return None
        return ("invalid_value", path, f"must be a finite number (got {v})")
    if isinstance(v, Mapping):
        for k, x in v.items():
            if not isinstance(k, str):
                return ("wrong_type", path, f"keys must be strings (got {k!r})")
            f = _json_fault(x, f"{path}.{k}" if path else k)
            if f:
                return f
        return None
    if isinstance(v, (list, tuple)):
        for j, x in enumerate(v):
            f = _json_fault(x, f"{path}[{j}]")
            if f:
                return f
        return None
    if hasattr(v, "tolist") or hasattr(v, "item"):  # numpy
        try:
            return _json_fault(_jsonable(v), path)
        except (TypeError, ValueError):
            pass
    return ("wrong_type", path, f"{type(v).__name__} has no JSON form (give a string, number, "
                                "bool, None, list or dict)")


def _request_lines(items: Sequence[Any], context: Optional[str]) -> tuple:
    """The JSONL lines of the requests, their prompt texts, and {index: Fault} for requests
    without a JSON form: their line holds only their id (so ids stay unique as the CLI makes
    them), and their output is that error (as a line with a bad field is in a batch job)."""
    lines: List[str] = []
    texts: List[Optional[str]] = []
    faults: Dict[int, Fault] = {}
    for i, item in enumerate(items):
        if isinstance(item, str):
            obj: Dict[str, Any] = {"prompt": item}
        elif isinstance(item, Mapping):
            obj = dict(item)
        else:
            raise InputError(
                f"line {i + 1}: expected a prompt string or a request dict, got {type(item).__name__}"
            )
        if context is not None and "context" not in obj:
            obj["context"] = context
        try:
            lines.append(json.dumps(obj, default=_jsonable, allow_nan=False))
        except (TypeError, ValueError) as e:
            fault = _json_fault(obj, "") or ("wrong_type", "", str(e))
            faults[i] = fault
            rid = obj.get("id")
            ok_id = isinstance(rid, (str, int)) and not isinstance(rid, bool) and fault[1] != "id"
            lines.append(json.dumps({"id": rid} if ok_id else {}))
        p = obj.get("prompt")
        texts.append(p if isinstance(p, str) else None)
    return lines, texts, faults


def _defaults(sp: Any, n: int) -> List[Any]:
    if sp is None:
        return [SamplingParams()._to_core()]
    if isinstance(sp, SamplingParams):
        return [sp._to_core()]
    if isinstance(sp, (str, bytes, Mapping)):
        sps = None
    else:
        try:
            sps = list(sp)
        except TypeError:
            sps = None
    if sps is None:
        raise ConfigError("sampling_params must be a SamplingParams, a list of them (one per "
                          f"request) or None (got {sp!r})")
    if len(sps) != n:
        raise ConfigError(f"{len(sps)} SamplingParams for {n} requests: give one, or one per request")
    for s in sps:
        if not isinstance(s, SamplingParams):
            raise ConfigError(f"expected SamplingParams, got {type(s).__name__}")
    return [s._to_core() for s in sps]


def _request_output(o: Any, prompt: Optional[str], fault: Optional[Fault],
                    line: int) -> RequestOutput:
    error, kind, field = o.error or None, o.error_kind or None, o.error_field or None
    if fault and kind != "duplicate_id":  # a repeated id is reported first, as the CLI does
        kind, field, what = fault
        error = f"line {line}: field '{field}': {what}" if field else f"line {line}: {what}"
        field = field or None
    return RequestOutput(
        request_id=int(o.id) if o.numeric_id else o.id,
        prompt=prompt,
        outputs=[CompletionOutput(0, o.text, list(o.tokens), o.finish_reason)],
        usage=Usage(o.prompt_tokens, o.completion_tokens),
        error=error,
        error_kind=kind,
        error_field=field,
    )


def _want_bar(use_tqdm: Optional[bool]) -> bool:
    # True: always (Jupyter, logs); None: when stderr is a terminal.
    if use_tqdm is not None:
        return bool(use_tqdm)
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _ProgressBar:
    """A tqdm bar over requests, with the generated tokens per second."""

    def __init__(self, total: int) -> None:
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar = None
            return
        self._bar = tqdm(total=total, unit="req", desc="offgen", dynamic_ncols=True)
        self._done = 0

    def update(self, done: int, total: int, tokens: int, elapsed: float) -> None:
        if self._bar is None:
            return
        if total != self._bar.total:  # invalid requests are not run
            self._bar.total = total
        if done > self._done:
            self._bar.update(done - self._done)
            self._done = done
        if elapsed > 0:
            self._bar.set_postfix_str(f"{tokens / elapsed:.1f} tok/s", refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
