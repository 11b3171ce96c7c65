"""The Python API against `offgen generate`: the same requests, flags and seeds give the same
texts (greedy and sampled, plain prompts, request dicts, chat, shared contexts); errors raise the
offgen.Error classes with the CLI's messages; Ctrl-C stops a run and the engine still works."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import threading

import pytest

import offgen

PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea.",
    "List three prime numbers:",
    "Once upon a time, in a small village,",
    "The best way to learn a language is",
    "def fibonacci(n):",
]


@pytest.fixture(scope="module")
def llm(model):
    return offgen.LLM(model, threads=2)


def texts(outs):
    return {o.request_id: (o.outputs[0].text, o.outputs[0].finish_reason) for o in outs}


def cli_texts(records):
    return {i: (r["text"], r["finish_reason"]) for i, r in records.items()}


def test_plain_prompts_greedy_and_sampled_match_the_cli(llm, run_cli):
    rows = [{"prompt": p} for p in PROMPTS]
    for flags, sp in [
        ((), offgen.SamplingParams(max_tokens=12)),
        (("--temperature", 0.9, "--top-p", 0.95, "--top-k", 40, "--seed", 1234),
         offgen.SamplingParams(temperature=0.9, top_p=0.95, top_k=40, seed=1234, max_tokens=12)),
    ]:
        cli = run_cli(rows, "--threads", 2, "--max-tokens", 12, *flags)
        outs = llm.generate(PROMPTS, sp)
        assert [o.request_id for o in outs] == [f"line-{i + 1}" for i in range(len(PROMPTS))]
        assert texts(outs) == cli_texts(cli)
        for o in outs:
            usage = cli[o.request_id]["usage"]
            assert (o.usage.prompt_tokens, o.usage.completion_tokens) == (
                usage["prompt_tokens"], usage["completion_tokens"])
            assert o.prompt == PROMPTS[int(o.request_id.split("-")[1]) - 1]
            assert len(o.outputs[0].token_ids) == o.usage.completion_tokens


def test_sampled_texts_differ_by_seed(llm):
    sp = lambda seed: offgen.SamplingParams(temperature=1.0, max_tokens=16, seed=seed)
    a = texts(llm.generate(PROMPTS, sp(1)))
    b = texts(llm.generate(PROMPTS, sp(2)))
    assert a != b  # the seed reaches the sampler
    assert a == texts(llm.generate(PROMPTS, sp(1)))


def test_one_sampling_params_per_request(llm):
    hot = offgen.SamplingParams(temperature=1.0, top_k=50, seed=8, max_tokens=10)
    cool = offgen.SamplingParams(temperature=0.3, seed=9, max_tokens=6, stop=["."])
    per = [hot if i % 2 == 0 else cool for i in range(len(PROMPTS))]
    mixed = llm.generate(PROMPTS, per)
    # request i as in a run where every request has its SamplingParams (same ids, same seeds)
    all_hot, all_cool = texts(llm.generate(PROMPTS, hot)), texts(llm.generate(PROMPTS, cool))
    for i, o in enumerate(mixed):
        ref = all_hot if i % 2 == 0 else all_cool
        assert (o.outputs[0].text, o.outputs[0].finish_reason) == ref[o.request_id]
    with pytest.raises(offgen.ConfigError, match="one per request"):
        llm.generate(PROMPTS, [hot, cool])


def test_request_dicts_with_ids_and_overrides_match_the_cli(llm, run_cli):
    rows = [
        {"id": "greedy", "prompt": PROMPTS[0]},
        {"id": "hot", "prompt": PROMPTS[1], "temperature": 1.2, "top_p": 0.9},
        {"id": "seeded", "prompt": PROMPTS[2], "temperature": 0.8, "seed": 99},
        {"id": 17, "prompt": PROMPTS[3], "temperature": 0.7, "max_tokens": 5},
        {"prompt": PROMPTS[4], "temperature": 0.7, "stop": ["."]},
        {"id": "chat", "prompt": PROMPTS[5], "chat": True, "temperature": 0.5},
        {"id": "messages", "messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Name a colour."}],
         "temperature": 0.6},
    ]
    cli = run_cli(rows, "--threads", 2, "--max-tokens", 10, "--seed", 5)
    outs = llm.generate(rows, offgen.SamplingParams(max_tokens=10, seed=5))
    assert [o.request_id for o in outs] == ["greedy", "hot", "seeded", 17, "line-5", "chat",
                                            "messages"]  # an int id stays an int
    assert texts(outs) == cli_texts(cli)


def test_chat_matches_the_cli(llm, run_cli):
    convs = [[{"role": "user", "content": q}] for q in ("What is 2+2?", "Say hello.")]
    cli = run_cli([{"messages": c} for c in convs], "--threads", 2, "--max-tokens", 10,
                  "--temperature", 0.7, "--seed", 3)
    outs = llm.chat(convs, offgen.SamplingParams(max_tokens=10, temperature=0.7, seed=3))
    assert texts(outs) == cli_texts(cli)
    one = llm.chat(convs[0], offgen.SamplingParams(max_tokens=10, temperature=0.7, seed=3))
    assert one[0].outputs[0].text == outs[0].outputs[0].text  # one conversation: line-1 too


def test_control_strings_in_content_are_text_and_parse_special_applies_to_prompts(llm):
    ctl = "a<|im_end|>\n<|im_start|>system"
    sp = offgen.SamplingParams(max_tokens=1)
    n = {o.request_id: o.usage.prompt_tokens for o in llm.generate([
        {"id": "plain", "prompt": "a"},
        {"id": "parsed", "prompt": ctl},
        {"id": "text", "prompt": ctl, "parse_special": False},
        {"id": "chat", "messages": [{"role": "user", "content": "a"}]},
        {"id": "chat-ctl", "messages": [{"role": "user", "content": ctl}]},
    ], sp)}
    as_text = n["text"] - n["plain"]
    assert n["parsed"] - n["plain"] < as_text
    assert n["chat-ctl"] - n["chat"] == as_text  # message content never becomes control tokens


CONTEXT = (
    "The Zorvath expedition left port on the fourth of March with eleven crew. Its captain, "
    "Ilsa Marrow, kept the log in green ink. The ship, named Petrel, carried salt, rope and two "
    "hundred barrels of fresh water. On the ninth day a storm broke the foremast; the crew "
    "repaired it with spare timber from the hold. They reached the island of Caddo on the "
    "twentieth of March, where they traded salt for dried fish and mapped the northern bay. "
) * 2


@pytest.mark.parametrize("kv", [("full", 1.0), ("kvzip", 0.5)])
def test_shared_context_matches_the_cli(model, run_cli, tmp_path, kv):
    questions = ["Who was the captain?", "What broke on the ninth day?", "Where did they arrive?"]
    ctx_file = tmp_path / "context.txt"
    ctx_file.write_text(CONTEXT)
    rows = [{"id": f"q{i}", "prompt": q} for i, q in enumerate(questions)]
    rows.append({"id": "own", "prompt": "Who kept the log?", "context": CONTEXT[:300]})
    rows.append({"id": "sampled", "prompt": "What did they trade?", "temperature": 0.8})
    cli = run_cli(rows, "--threads", 2, "--max-tokens", 8, "--seed", 11, "--kv-policy", kv[0],
                  "--kv-budget", kv[1], "--context", ctx_file)
    llm = offgen.LLM(model, threads=2, kv_policy=kv[0], kv_budget=kv[1])
    outs = llm.generate(rows, offgen.SamplingParams(max_tokens=8, seed=11), context=CONTEXT)
    assert texts(outs) == cli_texts(cli)
    assert llm.stats["contexts"] == 2


def test_invalid_requests_raise_or_return_the_cli_errors(llm, run_cli):
    rows = [{"prompt": "ok"}, {"prompt": "hot", "temperature": 500}, {"prompt": "x", "colour": 1},
            {"id": "a", "prompt": "one"}, {"id": "a", "prompt": "two"}]
    cli = run_cli(rows, "--threads", 2, "--max-tokens", 4)
    with pytest.raises(offgen.InputError) as e:
        llm.generate(rows, offgen.SamplingParams(max_tokens=4))
    assert "field 'temperature': must be in [0, 100] (got 500)" in str(e.value)
    assert "(2 more failed)" in str(e.value)
    outs = llm.generate(rows, offgen.SamplingParams(max_tokens=4), on_error="return")
    assert [o.request_id for o in outs] == ["line-1", "line-2", "line-3", "a", "a#line-5"]
    for o in outs:
        rec = cli[o.request_id]
        if "error" in rec:
            assert o.outputs[0].finish_reason == "error" and not o.finished
            assert (o.error, o.error_kind, o.error_field) == (
                rec["error"]["message"], rec["error"]["kind"], rec["error"]["field"])
        else:
            assert o.error is None and o.outputs[0].text == rec["text"]


def test_ids_keep_their_type_as_in_the_cli(llm, run_cli):
    """7 and "7" are two requests (the CLI gives the number back as a number)."""
    rows = [{"id": 7, "prompt": PROMPTS[0], "temperature": 0.8},
            {"id": "7", "prompt": PROMPTS[1], "temperature": 0.8},
            {"id": 7, "prompt": PROMPTS[2]}]
    cli = run_cli(rows, "--threads", 2, "--max-tokens", 5)
    assert len(cli) == 3 and set(cli) == {7, "7", "7#line-3"}  # in the order they finish
    outs = llm.generate(rows, offgen.SamplingParams(max_tokens=5), on_error="return")
    assert [o.request_id for o in outs] == [7, "7", "7#line-3"]
    assert outs[0].error is None and outs[1].error is None
    assert outs[2].error_kind == "duplicate_id"
    assert outs[2].error == cli["7#line-3"]["error"]["message"]
    assert texts(outs[:2]) == cli_texts({k: cli[k] for k in (7, "7")})


def test_requests_without_a_json_form_fail_alone(llm):
    """A value JSON cannot hold (bytes, a set, NaN) makes its request an error naming the field
    and the rule; the others run with the texts they have without it."""
    sp = offgen.SamplingParams(max_tokens=5)
    rows = [{"id": "a", "prompt": PROMPTS[0]},
            {"id": "bytes", "prompt": b"Hello"},
            {"id": "set", "prompt": PROMPTS[1], "tags": {1, 2}},
            {"prompt": PROMPTS[2], "temperature": math.nan},
            {"id": "b", "prompt": PROMPTS[3]},
            {"id": "bytes", "prompt": "a duplicate of a failed request's id"}]
    outs = llm.generate(rows, sp, on_error="return")
    got = [(o.request_id, o.error_kind, o.error_field, o.error) for o in outs]
    assert got[1:4] == [
        ("bytes", "wrong_type", "prompt", "line 2: field 'prompt': bytes has no JSON form (give a "
                                          "string, number, bool, None, list or dict)"),
        ("set", "wrong_type", "tags", "line 3: field 'tags': set has no JSON form (give a string, "
                                      "number, bool, None, list or dict)"),
        ("line-4", "invalid_value", "temperature",
         "line 4: field 'temperature': must be a finite number (got nan)")]
    assert got[5][:2] == ("bytes#line-6", "duplicate_id")
    ref = texts(llm.generate([rows[0], rows[4]], sp))
    assert texts([outs[0], outs[4]]) == ref
    with pytest.raises(offgen.InputError,
                       match=r"request 'bytes': line 2: field 'prompt'.*\(3 more failed\)"):
        llm.generate(rows, sp)


def test_wrong_argument_types_name_the_parameter(model, llm):
    """Never nanobind's "incompatible function arguments" with C++ signatures."""
    cases = [
        (lambda: offgen.SamplingParams(temperature=math.nan),
         r"temperature must be in \[0, 100\] \(got nan\)"),
        (lambda: offgen.SamplingParams(max_tokens=2 ** 70),
         r"max_tokens must be an integer in \[0, "),
        (lambda: offgen.SamplingParams(seed=2 ** 64),
         r"seed must be an integer in \[0, 18446744073709551615\]"),
        (lambda: offgen.LLM(model, threads="2"), "threads must be an integer"),
        (lambda: offgen.LLM(model, threads=2 ** 40), "threads must be an integer in"),
        (lambda: offgen.LLM(model, weight_dtype=5), "weight_dtype must be a string"),
        (lambda: offgen.LLM(model, max_context=1.5), "max_context must be an integer"),
        (lambda: offgen.LLM(None), "model must be a path"),
        (lambda: offgen.LLM(model, backend=5), "backend must be"),
        (lambda: offgen.LLM(model, kv_policy=5), "kv_policy must be a string"),
        (lambda: offgen.LLM(model, io_queue_depth=2 ** 40), "io_queue_depth must be an integer in"),
        (lambda: offgen.Policy(offload_dir=5).resolve(), "offload_dir must be a path"),
        (lambda: offgen.Policy(percent=5).resolve(), "percent must be a list"),
        (lambda: llm.generate(["x"], chat="yes"), "chat must be True or False"),
        (lambda: llm.generate(["x"], 5), "sampling_params must be a SamplingParams"),
        (lambda: llm.generate(["x"], context=5), "context must be a string"),
        (lambda: llm.generate(["x"], use_tqdm="x"), "use_tqdm must be True or False"),
        (lambda: offgen.plan(model, prompt_len="128", gen_len=3), "prompt_len must be an integer"),
        (lambda: offgen.plan(model, prompt_len=128, gen_len=3, profile=5),
         "profile must be a path"),
        (lambda: offgen.plan(model, prompt_len=128, gen_len=3, max_batch=None),
         "max_batch must be an integer"),
    ]
    for call, message in cases:
        with pytest.raises(offgen.ConfigError, match=message) as e:
            call()
        assert "incompatible function arguments" not in str(e.value)
    with pytest.raises(offgen.InputError, match="messages must be a conversation"):
        llm.chat("hello")


def test_prompt_too_long_is_an_input_error(model):
    llm = offgen.LLM(model, threads=2, max_context=16)
    long_prompt = "word " * 64
    with pytest.raises(offgen.InputError, match="the context window is 16"):
        llm.generate([long_prompt], offgen.SamplingParams(max_tokens=4))
    outs = llm.generate(["Hi", long_prompt], offgen.SamplingParams(max_tokens=4), on_error="return")
    assert outs[0].error is None and outs[1].error_kind == "prompt_too_long"


def test_configuration_errors(model, tmp_path):
    with pytest.raises(offgen.ConfigError, match="temperature must be in"):
        offgen.SamplingParams(temperature=-1)
    # Strings and non-bools are not numbers and flags (bool("no") is True).
    with pytest.raises(offgen.ConfigError, match="ignore_eos must be True or False"):
        offgen.SamplingParams(ignore_eos="no")
    with pytest.raises(offgen.ConfigError, match="temperature must be a number"):
        offgen.SamplingParams(temperature="0.5")
    with pytest.raises(offgen.ConfigError, match="stop must be a string or a list of strings"):
        offgen.SamplingParams(stop=[1])
    with pytest.raises(offgen.ConfigError, match="overlap must be True or False"):
        offgen.Policy(overlap="false").resolve()
    with pytest.raises(offgen.ConfigError, match="--kv-budget"):
        offgen.LLM(model, kv_policy="h2o", kv_budget=0)
    with pytest.raises(offgen.ConfigError, match="unknown engine option colour"):
        offgen.LLM(model, colour="blue")
    with pytest.raises(offgen.ConfigError, match="--gpu-mem"):
        offgen.Policy(gpu_mem="12 parsecs").resolve()
    bad = tmp_path / "bad.toml"
    bad.write_text("gpu_batch_size = -3\n")
    with pytest.raises(offgen.ConfigError, match="bad.toml"):
        offgen.LLM(model, policy=str(bad))
    with pytest.raises(offgen.Error):
        offgen.LLM(str(tmp_path / "missing.gguf"))
    assert issubclass(offgen.ConfigError, offgen.Error) and issubclass(offgen.IoError, OSError)


def test_policy_objects_and_toml(model, tmp_path):
    p = offgen.Policy(gpu_batch_size=4, num_gpu_batches=2, kv_policy="h2o", kv_budget=0.5,
                      cpu_mem="8G")
    r = p.resolve()
    assert (r.gpu_batch_size, r.num_gpu_batches, r.kv_policy, r.kv_budget, r.cpu_mem) == (
        4, 2, "h2o", 0.5, 8 << 30)
    f = tmp_path / "p.toml"
    f.write_text(p.to_toml())
    assert offgen.Policy.from_toml(f).resolve() == r
    llm = offgen.LLM(model, policy=p, threads=2, gpu_batch_size=3)  # keywords override
    assert llm.resolved_policy.gpu_batch_size == 3
    a = llm.generate(PROMPTS[:2], offgen.SamplingParams(max_tokens=6))
    b = offgen.LLM(model, threads=2, kv_policy="h2o", kv_budget=0.5).generate(
        PROMPTS[:2], offgen.SamplingParams(max_tokens=6))
    assert texts(a) == texts(b)  # the batch split does not change greedy texts


def test_kv_dtype_keyword_policy_and_alias(model, tmp_path):
    # kv_dtype= as a keyword (a Policy field), in a Policy and its TOML; compress_cache is q4g64.
    assert offgen.Policy().resolve().kv_dtype is None  # the backend's default (bf16 on the CPU)
    assert offgen.Policy(kv_dtype="q8_0").resolve().kv_dtype == "q8_0"
    assert offgen.Policy(compress_cache=True).resolve().kv_dtype == "q4g64"
    f = tmp_path / "kv.toml"
    f.write_text(offgen.Policy(kv_dtype="f16").to_toml())
    assert 'kv_dtype = "f16"' in f.read_text()
    assert offgen.Policy.from_toml(f).resolve().kv_dtype == "f16"
    with pytest.raises(offgen.ConfigError, match="--kv-dtype fp8: expected auto, f32, bf16"):
        offgen.Policy(kv_dtype="fp8").resolve()
    with pytest.raises(offgen.ConfigError, match="kv_dtype must be a string"):
        offgen.Policy(kv_dtype=8).resolve()
    with pytest.raises(offgen.ConfigError, match="contradicts --kv-dtype bf16"):
        offgen.Policy(kv_dtype="bf16", compress_cache=True).resolve()
    sp = offgen.SamplingParams(max_tokens=6)
    exact = texts(offgen.LLM(model, threads=2, kv_dtype="f32").generate(PROMPTS[:2], sp))
    q8 = offgen.LLM(model, threads=2, kv_dtype="q8_0", gpu_batch_size=1)
    assert q8.resolved_policy.kv_dtype == "q8_0"
    assert len(texts(q8.generate(PROMPTS[:2], sp))) == len(exact)
    with pytest.raises(offgen.ConfigError, match="--kv-dtype auto asks the planner"):
        offgen.LLM(model, threads=2, kv_dtype="auto")


def test_ctrl_c_stops_generate_and_the_engine_stays_usable(llm):
    sp = offgen.SamplingParams(max_tokens=8)
    before = texts(llm.generate(PROMPTS[:2], sp))
    many = [f"{p} (variant {i})" for i in range(40) for p in PROMPTS]
    timer = threading.Timer(1.0, lambda: signal.raise_signal(signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        llm.generate(many, offgen.SamplingParams(max_tokens=400, ignore_eos=True))
    timer.cancel()
    assert texts(llm.generate(PROMPTS[:2], sp)) == before


@pytest.fixture(scope="module")
def profile(model, offgen_bin, tmp_path_factory):
    """A quick hardware profile with this model's compute at 1 thread (`offgen calibrate`; the
    machine's load does not matter to these tests: --allow-busy)."""
    d = tmp_path_factory.mktemp("profile")
    path = d / "profile.json"
    subprocess.run([offgen_bin, "calibrate", "--quick", "--allow-busy", "--offload-dir", str(d),
                    "--model", model, "--threads", "1", "--json", str(path)], check=True,
                   capture_output=True)
    return path


def test_plan_matches_the_cli(model, offgen_bin, profile, tmp_path):
    plan_json = tmp_path / "plan.json"
    subprocess.run([offgen_bin, "plan", "--model", model, "--threads", "1", "--prompt-len", "128",
                    "--gen-len", "32", "--num-requests", "24", "--cpu-mem", "2G", "--profile",
                    str(profile), "--json", str(plan_json)], check=True, capture_output=True)
    cli = json.loads(plan_json.read_text())
    p = offgen.plan(model, prompt_len=128, gen_len=32, num_requests=24, threads=1,
                    profile=str(profile), cpu_mem="2G")
    assert p.toml == cli["policy_toml"]
    assert p.batch_size == cli["batch_size"] and p.binding == cli["binding"]
    assert p.total_throughput == pytest.approx(cli["predicted_total_throughput"])
    assert p.policy.resolve() == offgen.Policy.from_toml(_write(tmp_path / "p.toml", p.toml)).resolve()
    with pytest.raises(offgen.ConfigError, match="nothing fits"):
        offgen.plan(model, prompt_len=128, gen_len=32, threads=1, profile=str(profile),
                    cpu_mem="1M")


def _write(path, text):
    path.write_text(text)
    return path


def test_policy_auto_plans_for_the_first_call(model, profile, monkeypatch):
    monkeypatch.setenv("OFFGEN_PROFILE", str(profile))
    llm = offgen.LLM(model, policy="auto", threads=1, cpu_mem="2G")
    assert llm.resolved_policy.gpu_batch_size is None  # not planned before the requests are known
    # Calls without a valid request plan nothing: [] for no request, error outputs otherwise.
    assert llm.generate([]) == []
    bad = llm.generate([""], on_error="return")
    assert bad[0].outputs[0].finish_reason == "error" and "must not be empty" in bad[0].error
    assert llm.resolved_policy.gpu_batch_size is None
    outs = llm.generate(PROMPTS[:3], offgen.SamplingParams(max_tokens=6))
    ref = offgen.LLM(model, threads=1).generate(PROMPTS[:3], offgen.SamplingParams(max_tokens=6))
    assert texts(outs) == texts(ref)
    assert llm.resolved_policy.gpu_batch_size is not None  # the planner's choice
