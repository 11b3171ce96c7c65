"""offgen: offline, high-throughput batch generation with LLMs (FlexGen-style offloading and
KV-cache eviction), from Python. The same C++ engine as the ``offgen`` command.

    import offgen
    llm = offgen.LLM("model.gguf", kv_policy="h2o", kv_budget=0.5)
    outs = llm.generate(["Hello"], offgen.SamplingParams(max_tokens=32))
    print(outs[0].outputs[0].text)

Multi-node batches on Ray Data: ``offgen.ray`` (needs ``pip install offgen[ray]``).
"""

from .errors import ConfigError, Error, InputError, InternalError, IoError, ResourceError
from .llm import LLM, CompletionOutput, RequestOutput, Usage
from .params import Policy, SamplingParams
from .planning import Plan, plan

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "SamplingParams",
    "Policy",
    "plan",
    "Plan",
    "RequestOutput",
    "CompletionOutput",
    "Usage",
    "Error",
    "ConfigError",
    "InputError",
    "ResourceError",
    "IoError",
    "InternalError",
]
