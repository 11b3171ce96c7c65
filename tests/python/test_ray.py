"""offgen.ray on a local Ray cluster (2 CPUs, 2 actors of 1 thread): every input row appears
once in the written output with the texts of a single-process run, bad rows become error rows,
and an actor killed mid-job is restarted with its batch retried."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

import offgen

ray = pytest.importorskip("ray")
from offgen.ray import ProcessorConfig, build_processor  # noqa: E402

pytestmark = pytest.mark.ray

N = 240
TOPICS = ["rivers", "owls", "bridges", "tea", "comets", "maps", "bees", "glass", "salt", "kites",
          "tides", "clocks"]


def make_rows():
    rows = []
    for i in range(N):
        rows.append({"qid": i, "question": f"Tell me one fact about {TOPICS[i % len(TOPICS)]} "
                                           f"(note {i // len(TOPICS)}).",
                     "hot": i % 3 == 0})
    return rows


def preprocess(row):
    sp = {"max_tokens": 6}
    if row["hot"]:
        sp.update(temperature=0.8, top_p=0.9)
    return {"id": f"q{row['qid']}", "prompt": row["question"], "qid": row["qid"],
            "sampling_params": sp}


def postprocess(row):
    row["answer_chars"] = len(row["generated_text"] or "")
    return row


@pytest.fixture(scope="module")
def cluster():
    # The actors run this module's functions: ship them by value (tests/ is not importable there).
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage reports sent anywhere
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(model):
    """The texts of one process over the same requests (ids give the same seeds)."""
    llm = offgen.LLM(model, threads=2)
    reqs = [preprocess(r) for r in make_rows()]
    outs = llm.generate([{"id": r["id"], "prompt": r["prompt"], **r["sampling_params"]}
                         for r in reqs])
    return {int(o.request_id[1:]): (o.outputs[0].text, o.usage.completion_tokens) for o in outs}


def config(model, **kw):
    return ProcessorConfig(model=model, concurrency=2, batch_size=16,
                           engine_kwargs={"threads": 1}, num_cpus=0.5, **kw)


def read_output(path: Path):
    rows = []
    for f in sorted(path.glob("*.json*")):
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return rows


def run(model, tmp_path, name, rows, pre=preprocess, post=postprocess):
    src = tmp_path / f"{name}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"{name}-out"
    proc = build_processor(config(model), preprocess=pre, postprocess=post)
    proc(ray.data.read_json(str(src))).write_json(str(out))
    return read_output(out)


def check_all_rows(out, reference):
    by_qid = {}
    for r in out:
        assert r["qid"] not in by_qid, f"row {r['qid']} written twice"
        by_qid[r["qid"]] = r
    assert sorted(by_qid) == list(range(N))
    for qid, r in by_qid.items():
        assert r["error"] is None, r
        text, tokens = reference[qid]
        assert (r["generated_text"], r["num_generated_tokens"]) == (text, tokens), qid
        assert r["answer_chars"] == len(text)
        assert r["finish_reason"] in ("stop", "length")


def test_every_row_once_with_single_process_texts(model, cluster, reference, tmp_path):
    check_all_rows(run(model, tmp_path, "all", make_rows()), reference)


def test_bad_rows_become_error_rows(model, cluster, tmp_path):
    rows = [{"qid": 0, "question": "Fine question?", "hot": False},
            {"qid": 1, "question": "", "hot": False},  # empty prompt
            {"qid": 2, "question": "Too hot?", "hot": False, "temperature": 500},
            {"qid": 3, "question": None, "hot": False},  # preprocess raises
            {"qid": 4, "question": "Also fine?", "hot": False}]

    def pre(row):
        if row["question"] is None:
            raise ValueError("no question")
        out = preprocess(row)
        if row.get("temperature") is not None:  # null where a row lacks it
            out["sampling_params"]["temperature"] = row["temperature"]
        return out

    out = {r["qid"]: r for r in run(model, tmp_path, "bad", rows, pre=pre)}
    assert sorted(out) == [0, 1, 2, 3, 4]
    assert out[0]["error"] is None and out[4]["error"] is None
    assert out[1]["error"] == "field 'prompt': must not be empty"
    assert out[2]["error"] == "field 'temperature': must be in [0, 100] (got 500)"
    assert out[3]["error"] == "preprocess: ValueError: no question"
    for q in (1, 2, 3):
        assert out[q]["finish_reason"] == "error" and out[q]["generated_text"] is None


def test_killed_actor_is_retried_and_rows_stay_once(model, cluster, reference, tmp_path):
    marker = str(tmp_path / "killed-once")

    def pre(row):
        if row["qid"] == N // 2:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)  # this actor dies mid-job, once
        return preprocess(row)

    out = run(model, tmp_path, "killed", make_rows(), pre=pre)
    assert os.path.exists(marker)
    check_all_rows(out, reference)


def test_stage_batches_keep_every_rows_columns(model):
    """One batch through the stage itself (no cluster): rows whose sampling_params set different
    fields (Arrow fills the others with None), a sampling_params naming a request field, and a
    postprocess that fails on the batch's first row while the others keep their own columns."""
    import pyarrow as pa

    from offgen.ray import _OffgenStage

    cfg = ProcessorConfig(model=model, engine_kwargs={"threads": 1},
                          sampling_params={"max_tokens": 4})
    rows = [{"qid": 0, "prompt": "Hi", "sampling_params": {"temperature": 0.0, "max_tokens": None}},
            {"qid": 1, "prompt": "Yo", "sampling_params": {"temperature": None, "max_tokens": 2}},
            {"qid": 2, "prompt": "Hey", "sampling_params": {"prompt": "hijack"}}]
    out = _OffgenStage(cfg, None, None)(pa.Table.from_pylist(rows)).to_pylist()
    assert out[0]["error"] is None and out[1]["error"] is None, out
    assert out[1]["num_generated_tokens"] <= 2
    assert out[2]["error"].startswith("preprocess: ValueError: sampling_params: unknown field "
                                      "'prompt'"), out[2]

    def post(row):
        if row["qid"] == 0:
            raise KeyError("boom")
        return {"qid": row["qid"], "answer": row["generated_text"]}

    plain = [{"qid": q, "prompt": p} for q, p in ((0, "Hi"), (1, "Yo"))]
    out = _OffgenStage(cfg, None, post)(pa.Table.from_pylist(plain)).to_pylist()
    assert out[0]["error"] == "postprocess: KeyError: 'boom'"
    assert out[1]["answer"] and out[1]["qid"] == 1 and out[1].get("error") is None, out
