#!/usr/bin/env python3
"""Throughput of one batch job through the Python API against the same job through the CLI, and
through offgen.ray (A actors x 1 thread) against one process (A threads), on this machine.

    PYTHONPATH=build/python python3 bench/python/bench_python.py cli --model M [--rounds 3]
    PYTHONPATH=build/python python3 bench/python/bench_python.py ray --model M

The job: --requests greedy prompts (a fixed set of topics x phrasings), --max-tokens each,
ignore_eos so every request generates exactly that many tokens. `cli` alternates runs of
`offgen generate` (its --report) and of the API in fresh processes, and prints each run and
the medians; `ray` times the whole Ray Data job (actors start, load the model, generate, write)
against one process (load + generate)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPICS = ["rivers", "owls", "bridges", "tea", "comets", "maps", "bees", "glass", "salt", "kites",
          "tides", "clocks", "ferns", "lamps", "wolves", "coral"]
FORMS = ["Write two sentences about {}.", "Explain how {} work.", "Tell a short story about {}.",
         "List facts about {}:"]


def prompts(n: int):
    return [FORMS[(i // len(TOPICS)) % len(FORMS)].format(TOPICS[i % len(TOPICS)]) + f" ({i})"
            for i in range(n)]


def api_run(args) -> dict:
    """One API run in this process: load, then generate (timed)."""
    import offgen

    t0 = time.perf_counter()
    llm = offgen.LLM(args.model, threads=args.threads)
    load = time.perf_counter() - t0
    sp = offgen.SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    ps = prompts(args.requests)
    t1 = time.perf_counter()
    outs = llm.generate(ps, sp, use_tqdm=False)
    call = time.perf_counter() - t1
    tokens = sum(o.usage.completion_tokens for o in outs)
    s = llm.stats
    return {"load_seconds": load, "call_seconds": call, "engine_seconds": s["wall_seconds"],
            "tokens": tokens}


def cli_run(args, work: Path) -> dict:
    inp, out, rep = work / "in.jsonl", work / "out.jsonl", work / "report.json"
    inp.write_text("".join(json.dumps({"prompt": p, "ignore_eos": True}) + "\n"
                           for p in prompts(args.requests)))
    subprocess.run([args.offgen, "generate", "--model", args.model, "--input", str(inp),
                    "--output", str(out), "--overwrite", "-q", "--threads", str(args.threads),
                    "--max-tokens", str(args.max_tokens), "--report", str(rep)], check=True)
    r = json.loads(rep.read_text())
    return {"load_seconds": r["load_seconds"], "call_seconds": r["wall_seconds"] - r["load_seconds"],
            "engine_seconds": r["generate_seconds"], "tokens": r["tokens"]["completion"]
            if isinstance(r.get("tokens"), dict) else None}


def cmd_cli(args) -> None:
    rows = {"cli": [], "api": []}
    with tempfile.TemporaryDirectory() as d:
        for k in range(args.rounds):
            for side in ("cli", "api") if k % 2 == 0 else ("api", "cli"):
                ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                if side == "cli":
                    r = cli_run(args, Path(d))
                else:
                    p = subprocess.run([sys.executable, __file__, "api-once", "--model", args.model,
                                        "--threads", str(args.threads), "--requests",
                                        str(args.requests), "--max-tokens", str(args.max_tokens)],
                                       check=True, capture_output=True, text=True)
                    r = json.loads(p.stdout)
                ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                # The whole process (load, job, exit): CPU seconds are less disturbed than wall
                # time by other work on a shared machine.
                r["cpu_seconds"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
                r["tokens"] = r["tokens"] or args.requests * args.max_tokens
                rows[side].append(r)
                print(f"round {k} {side}: job {r['call_seconds']:.2f}s "
                      f"({r['tokens'] / r['call_seconds']:.1f} tok/s), engine "
                      f"{r['engine_seconds']:.2f}s, process CPU {r['cpu_seconds']:.2f}s "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    keys = ("call_seconds", "engine_seconds", "cpu_seconds")
    med = {s: {k: statistics.median(r[k] for r in rows[s]) for k in keys} for s in rows}
    tokens = args.requests * args.max_tokens
    for s in rows:
        print(f"median {s}: job {tokens / med[s]['call_seconds']:.1f} tok/s, engine "
              f"{tokens / med[s]['engine_seconds']:.1f} tok/s, per process CPU second "
              f"{tokens / med[s]['cpu_seconds']:.1f} tok/s")
    print("api/cli throughput: " + ", ".join(
        f"{name} {med['cli'][k] / med['api'][k]:.3f}x"
        for name, k in (("job", "call_seconds"), ("engine", "engine_seconds"),
                        ("per CPU second", "cpu_seconds"))))


def cmd_ray(args) -> None:
    import ray

    import offgen
    from offgen.ray import ProcessorConfig, build_processor

    ps = prompts(args.requests)
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "in.jsonl"
        src.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ps))
        t0 = time.perf_counter()
        llm = offgen.LLM(args.model, threads=args.actors)
        outs = llm.generate(ps, offgen.SamplingParams(max_tokens=args.max_tokens, ignore_eos=True),
                            use_tqdm=False)
        single = time.perf_counter() - t0
        engine = llm.stats["wall_seconds"]
        ref = {o.outputs[0].text for o in outs}
        del llm
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage reports sent anywhere
        ray.init(num_cpus=args.actors, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        cfg = ProcessorConfig(model=args.model, concurrency=args.actors, batch_size=args.batch_size,
                              engine_kwargs={"threads": 1}, num_cpus=args.actor_cpus,
                              sampling_params={"max_tokens": args.max_tokens,
                                               "ignore_eos": True})
        t1 = time.perf_counter()
        build_processor(cfg)(ray.data.read_json(str(src))).write_json(str(Path(d) / "out"))
        distributed = time.perf_counter() - t1
        rows = [json.loads(line) for f in (Path(d) / "out").glob("*.json*")
                for line in f.read_text().splitlines()]
        ray.shutdown()
    tokens = args.requests * args.max_tokens
    same = {r["generated_text"] for r in rows} == ref and len(rows) == len(ps)
    print(f"one process x {args.actors} threads: {single:.2f}s load+generate "
          f"({tokens / single:.1f} tok/s), generate alone {engine:.2f}s ({tokens / engine:.1f} tok/s)")
    print(f"ray {args.actors} actors x 1 thread (num_cpus {args.actor_cpus}, batch_size "
          f"{args.batch_size}): {distributed:.2f}s for the whole job ({tokens / distributed:.1f} "
          f"tok/s); rows {len(rows)}, texts equal: {same}")
    print(f"ray/single: {single / distributed:.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["cli", "ray", "api-once"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--offgen", default=str(ROOT / "build" / "offgen"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--actor-cpus", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    if args.mode == "api-once":
        print(json.dumps(api_run(args)))
    elif args.mode == "cli":
        cmd_cli(args)
    else:
        cmd_ray(args)


if __name__ == "__main__":
    main()
