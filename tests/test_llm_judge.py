"""`beir-harness judge POOL --llm openai:MODEL`: LLM pre-judgments against a real chat-completions server on
127.0.0.1 that grades by a rule written here (from the query and document numbers in the prompt), counts
every request, and injects faults one request at a time: 429 with Retry-After, prose, an out-of-scale
grade, an HTML page, JSON without a message. Agreement with a human file is checked against scikit-learn."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli_runner import invoke
from sklearn.metrics import cohen_kappa_score

from harness.errors import HarnessError
from harness.io.cache import recall_record, remember_record
from harness.io.service import EndpointSpec
from harness.judging.llm import (
    CACHE_KIND,
    JudgePrompt,
    JudgeSpec,
    MalformedAnswer,
    cache_inputs,
    cached_grades,
    judge_pool,
    parse_grade,
)

N_QUERIES, N_DOCS, MODEL = 4, 12, "judge-7b"
ANNOTATOR = f"llm:{MODEL}"
ANSWERS = {
    "prose": "The passage seems quite relevant, I would say it is good.",
    "out-of-scale": "##final score: 7",
    "several": "##final score: 1\n##final score: 3",
}


def rule(query: int, doc: int) -> int:
    """The server's grade for query q<query> and document d<doc>: the reference every test checks against."""
    return (doc * 7 + query * 3) % 4


class _Service:
    def __init__(self):
        self.behaviours: list[str] = []  # consumed one per request; then "normal"
        self.always_prose: set[int] = set()  # documents whose every answer is prose
        self.requests: list[dict] = []
        self.times: list[float] = []  # when each request arrived
        self.auth: set[str | None] = set()  # Authorization headers seen
        self.latency = 0.0
        self.url = ""
        self.lock = threading.Lock()


@pytest.fixture
def service():
    state = _Service()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json", headers=()):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _chat(self, content: str):
            self._send(
                200,
                json.dumps(
                    {
                        "object": "chat.completion",
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105},
                    }
                ).encode(),
            )

        def do_POST(self):  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/chat/completions":
                self._send(404, b'{"error": "not found"}')
                return
            with state.lock:
                state.requests.append(body)
                state.times.append(time.monotonic())
                state.auth.add(self.headers.get("Authorization"))
                behaviour = state.behaviours.pop(0) if state.behaviours else "normal"
            time.sleep(state.latency)
            kind, _, arg = behaviour.partition(":")
            prompt = body["messages"][-1]["content"]
            query = int(re.search(r"^Query: query (\d+)$", prompt, re.M)[1])
            doc = int(re.search(r"^Passage: title (\d+)$", prompt, re.M)[1])
            if kind == "429":
                self._send(429, b'{"error": "rate limited"}', headers=[("Retry-After", arg or "0")])
            elif kind == "html":
                self._send(200, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")
            elif kind == "no-answer":
                self._send(200, b'{"error": {"message": "overloaded"}}')
            elif kind in ANSWERS or doc in state.always_prose:
                self._chat(ANSWERS.get(kind, ANSWERS["prose"]))
            else:
                self._chat(f"##final score: {rule(query, doc)}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def pool_dir(tmp_path) -> Path:
    """A pool made by `beir-harness pool` from one run: each query's top 5 documents."""
    root = tmp_path / "set"
    root.mkdir()
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for d in range(N_DOCS):
            handle.write(json.dumps({"_id": f"d{d:02d}", "title": f"title {d}", "text": f"text {{of}} {d}"}) + "\n")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as handle:
        for q in range(N_QUERIES):
            handle.write(json.dumps({"_id": f"q{q}", "text": f"query {q}"}) + "\n")
    rng = random.Random(3)
    lines = [
        f"q{q} Q0 d{d:02d} 0 {10 - r} sys" for q in range(N_QUERIES) for r, d in enumerate(rng.sample(range(N_DOCS), 5))
    ]
    (tmp_path / "run.trec").write_text("\n".join(lines) + "\n")
    out = tmp_path / "pool"
    result = invoke(["pool", str(root), "--runs", str(tmp_path / "run.trec"), "--depth", "5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _pool_pairs(pool: Path) -> list[tuple[str, str]]:
    with open(pool / "pool.csv", encoding="utf-8", newline="") as handle:
        return [(row["query_id"], row["doc_id"]) for row in csv.DictReader(handle)]


def _expected(pairs) -> dict[tuple[str, str], int]:
    return {(q, d): rule(int(q[1:]), int(d[1:])) for q, d in pairs}


def _written(pool: Path) -> dict[tuple[str, str], int]:
    with open(pool / f"judgments-llm_{MODEL}.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["annotator"] for row in rows} <= {ANNOTATOR}
    return {(row["query_id"], row["doc_id"]): int(row["grade"]) for row in rows}


def _spec(service, tmp_path, **changes) -> JudgeSpec:
    endpoint = EndpointSpec(
        **{
            "url": service.url,
            "backoff": 0.01,
            "timeout": 5.0,
            **{k: changes.pop(k) for k in ("concurrency", "attempts") if k in changes},
        }
    )
    return JudgeSpec(f"openai:{MODEL}", endpoint, cache_dir=tmp_path / "cache", **changes)


def _judge(service, pool: Path, tmp_path, *args):
    return invoke(
        [
            "judge",
            str(pool),
            "--llm",
            f"openai:{MODEL}",
            "--endpoint",
            service.url,
            "--cache-dir",
            str(tmp_path / "cache"),
            *map(str, args),
        ],
    )


def test_grades_are_the_servers_its_own_annotator_and_a_rerun_sends_no_request(service, pool_dir, tmp_path):
    pairs = _pool_pairs(pool_dir)
    result = _judge(service, pool_dir, tmp_path, "--concurrency", 4)
    assert result.exit_code == 0, result.output
    assert _written(pool_dir) == _expected(pairs) and len(pairs) == N_QUERIES * 5
    assert len(service.requests) == len(pairs)
    assert all(r["model"] == MODEL and r["temperature"] == 0 for r in service.requests)
    assert f"{ANNOTATOR} graded {len(pairs)} of {len(pairs)} pairs" in result.output
    summary = json.loads((pool_dir / f"judgments-llm_{MODEL}.json").read_text())
    assert summary["prompt_version"] == "umbrela-1" and "##final score" in summary["prompt"]
    assert summary["usage"] == {"requests": len(pairs), "tokens": 105 * len(pairs), "retries": 0}
    assert not (pool_dir.parent / "set" / "qrels").exists()  # nothing went into human judgments
    before = (pool_dir / f"judgments-llm_{MODEL}.csv").read_bytes()
    again = _judge(service, pool_dir, tmp_path)
    assert again.exit_code == 0, again.output
    assert len(service.requests) == len(pairs), "the rerun sent requests"
    assert (pool_dir / f"judgments-llm_{MODEL}.csv").read_bytes() == before
    assert f"{len(pairs)} from the cache" in again.output and "service: requests 0, tokens 0" in again.output


def test_the_key_is_sent_never_written_and_a_damaged_cache_entry_is_asked_again(
    service, pool_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-judge-secret-987")
    judge_pool(pool_dir, _spec(service, tmp_path))
    assert service.auth == {"Bearer sk-judge-secret-987"}
    entries = sorted((tmp_path / "cache" / "llm-judgments").rglob("*.json"))
    assert len(entries) == len(_pool_pairs(pool_dir))
    text = "".join(p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file())
    assert "sk-judge-secret-987" not in text
    entries[0].write_text('{"inputs": {"kind": "something else"}, "value": {"grade": 3}}')
    entries[1].write_text("{not json")
    sent = len(service.requests)
    report = judge_pool(pool_dir, _spec(service, tmp_path))
    assert len(service.requests) == sent + 2 and report.cached == len(entries) - 2
    assert report.grades == _expected(_pool_pairs(pool_dir))


def test_the_llm_file_merges_into_its_own_split_only_when_asked(service, pool_dir, tmp_path):
    assert _judge(service, pool_dir, tmp_path).exit_code == 0
    dataset = pool_dir.parent / "set"
    result = invoke(
        ["judgments", "merge", str(dataset), str(pool_dir / f"judgments-llm_{MODEL}.csv"), "--split", "llm"]
    )
    assert result.exit_code == 0, result.output
    lines = (dataset / "qrels" / "llm.tsv").read_text().splitlines()[1:]
    assert {(q, d): int(g) for q, d, g in map(str.split, lines)} == _expected(_pool_pairs(pool_dir))
    annotations = [json.loads(line) for line in (dataset / "qrels" / "llm.annotations.jsonl").read_text().splitlines()]
    assert {a["annotator"] for a in annotations} == {ANNOTATOR} and not (dataset / "qrels" / "test.tsv").exists()


def test_braces_and_placeholders_in_texts_are_sent_as_they_are(service, pool_dir, tmp_path):
    report = judge_pool(pool_dir, _spec(service, tmp_path, concurrency=1))
    assert not report.ungraded
    prompt = service.requests[0]["messages"][0]["content"]
    assert re.search(r"^text \{of\} \d+$", prompt, re.M)  # the document text, braces kept


def test_the_python_api_judges_as_the_command_does(service, pool_dir, tmp_path):
    import harness

    report = harness.judge(pool_dir, f"openai:{MODEL}", service.url, cache_dir=tmp_path / "cache")
    assert report.grades == _expected(_pool_pairs(pool_dir)) == _written(pool_dir)
    with pytest.raises(HarnessError, match="unknown setting `attempts`; judge takes answer_attempts"):
        harness.judge(pool_dir, f"openai:{MODEL}", service.url, attempts=2)


def test_429_with_retry_after_is_waited_for_and_counted(service, pool_dir, tmp_path):
    service.behaviours = ["429:1"]
    report = judge_pool(pool_dir, _spec(service, tmp_path, concurrency=1))
    assert service.times[1] - service.times[0] >= 0.95  # the service's Retry-After, not the 0.01 s backoff
    assert report.usage["retries"] == 1 and report.usage["requests"] == len(report.grades) + 1
    assert report.grades == _expected(_pool_pairs(pool_dir)) and not report.ungraded


@pytest.mark.parametrize("kind", ["prose", "out-of-scale", "html", "no-answer", "several"])
def test_a_malformed_answer_is_counted_and_asked_again_never_guessed(service, pool_dir, tmp_path, kind):
    service.behaviours = [kind]
    report = judge_pool(pool_dir, _spec(service, tmp_path, concurrency=1))
    counted = {"html": "not-json", "several": "prose"}.get(kind, kind)
    assert dict(report.malformed) == {counted: 1}
    assert report.grades == _expected(_pool_pairs(pool_dir)) and not report.ungraded
    assert len(service.requests) == len(report.grades) + 1
    assert report.summary()["malformed_answers"][counted] == 1


def test_a_pair_malformed_every_time_is_left_ungraded_and_listed(service, pool_dir, tmp_path):
    pairs = _pool_pairs(pool_dir)
    bad_doc = int(pairs[0][1][1:])
    service.always_prose = {bad_doc}
    bad = sorted(p for p in pairs if int(p[1][1:]) == bad_doc)
    result = _judge(service, pool_dir, tmp_path, "--answer-attempts", 2)
    assert result.exit_code == 0, result.output
    assert _written(pool_dir) == {p: g for p, g in _expected(pairs).items() if p not in bad}
    assert len(service.requests) == len(pairs) - len(bad) + 2 * len(bad)
    assert f"{len(bad)} ungraded" in result.output and f"{2 * len(bad)} prose" in result.output
    for q, d in bad:
        assert f"ungraded ({q}, {d}): prose: no final score" in result.output
    summary = json.loads((pool_dir / f"judgments-llm_{MODEL}.json").read_text())
    assert [(u["query_id"], u["doc_id"]) for u in summary["ungraded"]] == bad
    service.always_prose = set()  # the rerun asks the ungraded pairs only, and grades them
    sent = len(service.requests)
    again = _judge(service, pool_dir, tmp_path)
    assert again.exit_code == 0 and len(service.requests) == sent + len(bad)
    assert _written(pool_dir) == _expected(pairs)


@pytest.mark.parametrize("weights", ["none", "linear"])
def test_agreement_between_the_llm_and_a_human_matches_scikit_learn(service, pool_dir, tmp_path, weights):
    assert _judge(service, pool_dir, tmp_path).exit_code == 0
    pairs = _pool_pairs(pool_dir)
    rng = random.Random(11)
    human = {p: (g if rng.random() < 0.6 else rng.randint(0, 3)) for p, g in _expected(pairs).items()}
    graded = sorted(rng.sample(sorted(human), 14))  # the human graded only some pairs
    alice = tmp_path / "alice.csv"
    alice.write_text("query_id,doc_id,grade,annotator\n" + "".join(f"{q},{d},{human[q, d]},alice\n" for q, d in graded))
    result = invoke(
        ["judgments", "agreement", str(pool_dir / f"judgments-llm_{MODEL}.csv"), str(alice), "--weights", weights]
    )
    assert result.exit_code == 0, result.output
    llm = _written(pool_dir)
    kappa = cohen_kappa_score(
        [human[p] for p in graded],
        [llm[p] for p in graded],
        labels=[0, 1, 2, 3],
        weights=None if weights == "none" else weights,
    )
    row = next(line for line in result.output.splitlines() if line.strip().startswith("alice"))
    assert row.split()[1] == ANNOTATOR and row.split()[2] == "14" and row.split()[-1] == f"{kappa:.3f}"


# --- bad input: one line, exit 1, no judgments file --------------------------------------------------------------


def _refused(result, pool: Path | None, message: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("WARNING ")]  # retries
    assert len(lines) == 1 and message in lines[0], result.stderr
    if pool is not None:
        assert not list(pool.glob("judgments-*"))


def test_a_folder_that_is_not_a_pool_is_refused(service, tmp_path):
    (tmp_path / "empty").mkdir()
    _refused(
        _judge(service, tmp_path / "empty", tmp_path),
        tmp_path / "empty",
        "empty: not a pool folder (no manifest.json or pool.jsonl); make one with `beir-harness pool",
    )


def test_a_model_without_the_openai_prefix_is_refused(service, pool_dir, tmp_path):
    result = invoke(["judge", str(pool_dir), "--llm", MODEL, "--endpoint", service.url])
    _refused(result, pool_dir, f"--llm '{MODEL}': name the chat model as openai:MODEL")
    assert not service.requests


def test_a_pool_on_another_grade_scale_is_refused(service, pool_dir, tmp_path):
    manifest = json.loads((pool_dir / "manifest.json").read_text())
    manifest["grade_scale"] = manifest["grade_scale"][:2]
    (pool_dir / "manifest.json").write_text(json.dumps(manifest))
    _refused(
        _judge(service, pool_dir, tmp_path),
        pool_dir,
        "the pool's grade scale is 0, 1; the LLM prompt grades 0-3 (UMBRELA)",
    )
    assert not service.requests


def test_429_on_every_attempt_gives_up_in_one_line(service, pool_dir, tmp_path):
    service.behaviours = ["429:0.01"] * 6
    _refused(
        _judge(service, pool_dir, tmp_path, "--concurrency", 1),
        pool_dir,
        f"/chat/completions: giving up after 6 attempts (HTTP 429) for model {MODEL}",
    )
    assert len(service.requests) == 6  # the run stopped: no other pair was asked


# --- the calibration sample (judge --sample N) ----------------------------------------------------------------


def _run_ranks(tmp_path: Path) -> dict[str, list[str]]:
    """query → its documents in the run's order (read here from the run file the pool was made of)."""
    ranked: dict[str, list[tuple[float, str]]] = {}
    for line in (tmp_path / "run.trec").read_text().splitlines():
        q, _, d, _, score, _ = line.split()
        ranked.setdefault(q, []).append((-float(score), d))
    return {q: [d for _, d in sorted(docs)] for q, docs in ranked.items()}


def test_a_calibration_sample_grades_every_query_at_spread_ranks_and_writes_it_blind(service, pool_dir, tmp_path):
    result = _judge(service, pool_dir, tmp_path, "--sample", 8)
    assert result.exit_code == 0, result.output
    assert len(service.requests) == 8
    # 8 pairs over 4 queries: 2 each; of a query's 5 documents by rank, positions floor((i + 0.5) * 5 / 2) = 1, 3
    expected = {(q, docs[p]) for q, docs in _run_ranks(tmp_path).items() for p in (1, 3)}
    with open(pool_dir / f"judgments-llm_{MODEL}-sample.csv", encoding="utf-8", newline="") as handle:
        graded = {(row["query_id"], row["doc_id"]): int(row["grade"]) for row in csv.DictReader(handle)}
    assert graded == _expected(expected)
    with open(pool_dir / "calibration-sample.csv", encoding="utf-8", newline="") as handle:
        blind = list(csv.DictReader(handle))
    assert {(row["query_id"], row["doc_id"]) for row in blind} == expected
    assert all(row["grade"] == "" and row["text"] for row in blind)  # no grade shown to the human
    assert not (pool_dir / f"judgments-llm_{MODEL}.csv").exists()
    # the whole pool afterwards asks only the pairs the sample did not grade
    assert _judge(service, pool_dir, tmp_path).exit_code == 0
    assert len(service.requests) == 8 + (N_QUERIES * 5 - 8)


def test_a_human_grading_the_blind_sample_is_compared_by_judgments_agreement(service, pool_dir, tmp_path):
    assert _judge(service, pool_dir, tmp_path, "--sample", 12).exit_code == 0
    with open(pool_dir / "calibration-sample.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    human = [min(3, rule(int(r["query_id"][1:]), int(r["doc_id"][1:])) + (i % 3 == 0)) for i, r in enumerate(rows)]
    with open(tmp_path / "alice.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**r, "grade": g} for r, g in zip(rows, human))
    result = invoke(
        [
            "judgments",
            "agreement",
            str(pool_dir / f"judgments-llm_{MODEL}-sample.csv"),
            str(tmp_path / "alice.csv"),
            "--annotator",
            "alice",
        ],
    )
    assert result.exit_code == 0, result.output
    llm = [rule(int(r["query_id"][1:]), int(r["doc_id"][1:])) for r in rows]
    kappa = cohen_kappa_score(human, llm, labels=[0, 1, 2, 3], weights="linear")
    assert f"  κ alice × {ANNOTATOR}: {kappa:.3f} [" in result.output


def test_a_sample_smaller_than_the_pools_queries_is_refused_before_any_request(service, pool_dir, tmp_path):
    result = _judge(service, pool_dir, tmp_path, "--sample", 3)
    assert result.exit_code == 1
    assert "--sample 3: fewer pairs than the pool's 4 queries; give at least 4 so every query is in the sample" in (
        result.output
    )
    assert service.requests == [] and not list(pool_dir.glob("*sample*"))


def test_a_sample_of_no_pairs_is_refused_before_any_request(service, pool_dir, tmp_path):
    result = _judge(service, pool_dir, tmp_path, "--sample", 0)
    assert result.exit_code == 1
    assert "--sample 0: sample at least 1 pair, or judge the whole pool" in result.output
    assert service.requests == [] and not list(pool_dir.glob("*sample*"))


# The LLM judge's cache key and answer parser.
#
# The cache key must hold every input that decides a grade: a grade stored for one model, prompt version,
# prompt text, query, title or passage text must never be served when any one of them changes. Each field
# is changed in turn; the reference is the list of fields written here and hashlib's sha256 of the prompt.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


ROW = {"query_id": "q1", "doc_id": "d1", "query": "what is a cat", "title": "Cats", "text": "A cat is a mammal."}
SPEC = JudgeSpec(model="openai:judge-a")
PROMPT = JudgePrompt("1", "Grade {query} against {passage}\n")


def stored(root, spec=SPEC, prompt=PROMPT, row=ROW, grade=2):
    remember_record(root, CACHE_KIND, cache_inputs(spec, prompt, row), {"grade": grade})


def test_the_key_holds_each_input_by_value(tmp_path):
    inputs = cache_inputs(SPEC, PROMPT, ROW)
    assert inputs["model"] == "judge-a"
    assert inputs["prompt_version"] == "1"
    assert inputs["prompt_sha256"] == hashlib.sha256(PROMPT.text.encode("utf-8")).hexdigest()
    assert (inputs["query"], inputs["title"], inputs["text"]) == (ROW["query"], ROW["title"], ROW["text"])
    assert len(set(inputs.values())) == len(inputs)  # no field stands in for another
    # the whole key as cached grades on disk hold it: a renamed field would orphan every one of them
    assert inputs == {
        "kind": "llm-judgment",
        "model": "judge-a",
        "prompt_version": "1",
        "prompt_sha256": hashlib.sha256(PROMPT.text.encode("utf-8")).hexdigest(),
        "query": ROW["query"],
        "title": ROW["title"],
        "text": ROW["text"],
    }


def test_the_unchanged_inputs_are_served_from_the_cache(tmp_path):
    stored(tmp_path)
    assert cached_grades(SPEC, PROMPT, [ROW], tmp_path) == ({("q1", "d1"): 2}, [])


CHANGES = {
    "model": (JudgeSpec(model="openai:judge-b"), PROMPT, ROW),
    "prompt version": (SPEC, JudgePrompt("2", PROMPT.text), ROW),
    "prompt text": (SPEC, JudgePrompt("1", PROMPT.text + "Be strict.\n"), ROW),
    "query": (SPEC, PROMPT, {**ROW, "query": "what is a dog"}),
    "title": (SPEC, PROMPT, {**ROW, "title": "Dogs"}),
    "text": (SPEC, PROMPT, {**ROW, "text": "A dog is a mammal."}),
}


@pytest.mark.parametrize("field", CHANGES)
def test_a_grade_is_never_served_for_another_input(tmp_path, field):
    stored(tmp_path)
    spec, prompt, row = CHANGES[field]
    grades, todo = cached_grades(spec, prompt, [row], tmp_path)
    assert grades == {} and todo == [row]
    assert recall_record(tmp_path, CACHE_KIND, cache_inputs(spec, prompt, row)) is None


@pytest.mark.parametrize("field", CHANGES)
def test_each_input_keeps_its_own_grade(tmp_path, field):
    stored(tmp_path, grade=1)
    spec, prompt, row = CHANGES[field]
    stored(tmp_path, spec, prompt, row, grade=3)
    assert cached_grades(SPEC, PROMPT, [ROW], tmp_path)[0] == {("q1", "d1"): 1}
    assert cached_grades(spec, prompt, [row], tmp_path)[0] == {("q1", "d1"): 3}


def test_the_prefix_is_not_part_of_the_model():
    assert cache_inputs(JudgeSpec(model="openai:m"), PROMPT, ROW) == cache_inputs(JudgeSpec(model="m"), PROMPT, ROW)


@pytest.mark.parametrize("grade", [True, False, 4, -1, "2", 2.0, None])
def test_a_stored_value_off_the_scale_is_asked_again(tmp_path, grade):
    stored(tmp_path, grade=grade)
    assert cached_grades(SPEC, PROMPT, [ROW], tmp_path) == ({}, [ROW])


@pytest.mark.parametrize("grade", [0, 1, 2, 3])
def test_every_grade_on_the_scale_is_served(tmp_path, grade):
    stored(tmp_path, grade=grade)
    assert cached_grades(SPEC, PROMPT, [ROW], tmp_path) == ({("q1", "d1"): grade}, [])


def test_without_the_cache_nothing_is_read(tmp_path):
    stored(tmp_path)
    spec = JudgeSpec(model="openai:judge-a", use_cache=False)
    assert cached_grades(spec, PROMPT, [ROW], tmp_path) == ({}, [ROW])


@pytest.mark.parametrize(
    "answer, grade",
    [
        ("##final score: 2", 2),
        ("## Final Score : 3", 3),
        ("reasoning...\n##final score:0", 0),
        ("3", 3),
        ("  1 \n", 1),
        ("0", 0),
        ("##FINAL SCORE: 1\nthanks", 1),
    ],
)
def test_a_grade_is_read(answer, grade):
    assert parse_grade(answer) == grade


@pytest.mark.parametrize(
    "answer, kind",
    [
        ("", "prose"),
        ("the passage is relevant", "prose"),
        ("grade 2", "prose"),
        ("##final score: 1\n##final score: 2", "prose"),
        ("2 3", "prose"),
        ("4", "out-of-scale"),
        ("-1", "out-of-scale"),
        ("2.0", "out-of-scale"),
        ("##final score: 2.5", "out-of-scale"),
        ("##final score: 9", "out-of-scale"),
    ],
)
def test_an_answer_without_one_grade_on_the_scale_is_malformed(answer, kind):
    with pytest.raises(MalformedAnswer) as caught:
        parse_grade(answer)
    assert caught.value.kind == kind


def test_the_prompt_fills_both_places_once_and_never_from_the_texts():
    prompt = JudgePrompt("1", "Q={query} P={passage}")
    assert prompt.render("a {passage}", "T", "x {query}") == "Q=a {passage} P=T\nx {query}"
    assert prompt.render("a", "", "x") == "Q=a P=x"


@pytest.mark.parametrize(
    "answer, detail",
    [
        ("the passage is relevant", "no final score in 'the passage is relevant'"),
        ("  " + "a" * 100 + " ", f"no final score in {'a' * 80!r}"),
        ("##final score: 1 ##final score: 2", "2 final scores in '##final score: 1 ##final score: 2'"),
        ("4", "grade 4 is not one of 0, 1, 2, 3"),
        ("##final score: 2.5", "grade 2.5 is not one of 0, 1, 2, 3"),
    ],
)
def test_a_malformed_answer_says_what_it_held(answer, detail):
    with pytest.raises(MalformedAnswer) as caught:
        parse_grade(answer)
    assert caught.value.detail == detail
    assert str(caught.value) == f"{caught.value.kind}: {detail}"


class FakeResponse:
    """An httpx response's two members answer_content reads."""

    def __init__(self, text, payload=None):
        self.text, self._payload = text, payload

    def json(self):
        if self._payload is None:
            raise ValueError("not JSON")
        return self._payload


def _content(payload):
    from harness.judging.llm import answer_content

    return answer_content(FakeResponse("{}", payload))


def test_the_first_choice_s_content_and_the_usage_are_read():
    payload = {
        "choices": [{"message": {"content": "##final score: 1"}}, {"message": {"content": "2"}}],
        "usage": {"prompt_tokens": 7},
    }
    assert _content(payload) == ("##final score: 1", {"prompt_tokens": 7})
    assert _content({"choices": [{"message": {"content": "x"}}]}) == ("x", {})
    assert _content({"choices": [{"message": {"content": "x"}}], "usage": None}) == ("x", {})


@pytest.mark.parametrize(
    "payload, detail",
    [
        ({}, "no choices[0].message.content in '{}'"),
        ({"choices": []}, "no choices[0].message.content in \"{'choices': []}\""),
        ({"choices": [{"message": {}}]}, "no choices[0].message.content in \"{'choices': [{'message': {}}]}\""),
        ({"choices": [{"text": "2"}]}, "no choices[0].message.content in \"{'choices': [{'text': '2'}]}\""),
        ({"choices": "x" * 200}, f"no choices[0].message.content in {str({'choices': 'x' * 200})[:80]!r}"),
        ({"choices": [{"message": {"content": 3}}]}, "the message content is int, not text"),
        ({"choices": [{"message": {"content": None}}]}, "the message content is NoneType, not text"),
    ],
)
def test_an_answer_without_a_message_is_no_answer(payload, detail):
    with pytest.raises(MalformedAnswer) as caught:
        _content(payload)
    assert (caught.value.kind, caught.value.detail) == ("no-answer", detail)


def test_an_answer_that_is_not_json_shows_its_start_on_one_line():
    from harness.judging.llm import answer_content

    text = "  <html>\n<body>" + "y" * 100
    with pytest.raises(MalformedAnswer) as caught:
        answer_content(FakeResponse(text))
    start = text[:60].strip().replace("\n", " ")
    assert start.startswith("<html> <body>yyy") and len(start) == 58
    assert (caught.value.kind, caught.value.detail) == ("not-json", f"the answer is not JSON (starts with {start!r})")


def test_the_annotator_is_the_model_without_its_prefix():
    assert JudgeSpec(model="openai:gpt-x").annotator == "llm:gpt-x"
    assert JudgeSpec(model="openai:gpt-x").service_model == "gpt-x"
