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


def check_all_rows(out, reference, failed=()):
    """Every row once; those not in `failed` with the single-process text. Returns them by qid."""
    by_qid = {}
    for r in out:
        assert r["qid"] not in by_qid, f"row {r['qid']} written twice"
        by_qid[r["qid"]] = r
    assert sorted(by_qid) == list(range(N))
    for qid, r in by_qid.items():
        if qid in failed:
            continue
        assert r["error"] is None and r["error_kind"] is None, r
        text, tokens = reference[qid]
        assert (r["generated_text"], r["num_generated_tokens"]) == (text, tokens), qid
        assert r["answer_chars"] == len(text)
        assert r["finish_reason"] in ("stop", "length")
    return by_qid


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
    assert [out[q]["error_kind"] for q in (1, 2, 3)] == ["invalid_value", "invalid_value",
                                                           "preprocess_error"]
    for q in (1, 2, 3):
        assert out[q]["finish_reason"] == "error" and out[q]["generated_text"] is None


def test_rows_with_bad_values_fail_alone(model, cluster, reference, tmp_path):
    """An int prompt, a bytes prompt, a set as the context (no JSON form) and a carried field
    that no table column holds (an object), in one dataset: exactly those rows are error rows,
    with the kind and the message; every other row is written once with the text of a single
    process."""
    def pre(row):
        out = preprocess(row)
        if row["qid"] == 5:
            out["prompt"] = 5
        elif row["qid"] == 77:
            out["prompt"] = row["question"].encode()
        elif row["qid"] == 150:
            out["handle"] = object()  # carried to postprocess, which keeps it
        elif row["qid"] == 200:
            out["context"] = {"a", "b"}
        return out

    no_json = "has no JSON form (give a string, number, bool, None, list or dict)"
    failed = {
        5: ("wrong_type", "field 'prompt': expected a string, got number"),
        77: ("wrong_type", f"field 'prompt': bytes {no_json}"),
        150: ("unstorable_value",
              "column 'handle': a value of type object cannot be stored in a table column"),
        200: ("wrong_type", f"field 'context': set {no_json}"),
    }
    by_qid = check_all_rows(run(model, tmp_path, "badvalues", make_rows(), pre=pre), reference,
                            failed)
    for qid, (kind, message) in failed.items():
        r = by_qid[qid]
        assert (r["error_kind"], r["error"]) == (kind, message), r
        assert r["finish_reason"] == "error" and r["generated_text"] is None, r
        assert r.get("handle") is None and r.get("context") is None, r
    assert by_qid[5]["prompt"] is None and by_qid[77]["prompt"] is None  # no value of another type
    assert by_qid[150]["prompt"] == make_rows()[150]["question"]


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
    assert out[2]["error_kind"] == "unknown_field", out[2]
    assert out[2]["error"].startswith("field 'sampling_params.prompt': unknown field"), out[2]

    # parse_special (like tools and chat_template_kwargs) reaches the request: a wrong type is
    # that row's request error.
    def pre_fn(r):
        return {"prompt": r["prompt"]} if r["qid"] == 0 else \
            {"prompt": r["prompt"], "parse_special": "no"}

    pre = _OffgenStage(cfg, pre_fn, None)(pa.Table.from_pylist(rows[:2])).to_pylist()
    assert pre[0]["error"] is None, pre
    assert "parse_special" in (pre[1]["error"] or ""), pre

    def post(row):
        if row["qid"] == 0:
            raise KeyError("boom")
        return {"qid": row["qid"], "answer": row["generated_text"]}

    plain = [{"qid": q, "prompt": p} for q, p in ((0, "Hi"), (1, "Yo"))]
    out = _OffgenStage(cfg, None, post)(pa.Table.from_pylist(plain)).to_pylist()
    assert out[0]["error"] == "postprocess: KeyError: 'boom'"
    assert out[0]["error_kind"] == "postprocess_error"
    assert out[1]["answer"] and out[1]["qid"] == 1 and out[1].get("error") is None, out

    # A carried value of another type than the column's other rows (an int among strings), and
    # one no column holds (an object): those rows fail, without the value; the others complete.
    def pre(row):
        notes = {0: "x", 1: 3, 2: "y", 3: object(), 4: "z"}
        return {"prompt": row["prompt"], "qid": row["qid"], "note": notes[row["qid"]]}

    rows = [{"qid": q, "prompt": "Hi"} for q in range(5)]
    out = _OffgenStage(cfg, pre, None)(pa.Table.from_pylist(rows)).to_pylist()
    assert [r["error_kind"] for r in out] == [None, "unstorable_value", None, "unstorable_value",
                                              None]
    assert out[1]["error"] == ("column 'note': a value of type int does not fit the column's type "
                               "string (that of the other rows)")
    assert out[3]["error"] == ("column 'note': a value of type object cannot be stored in a table "
                               "column")
    assert [r["note"] for r in out] == ["x", None, "y", None, "z"]
    assert out[0]["generated_text"] == out[2]["generated_text"] == out[4]["generated_text"]
