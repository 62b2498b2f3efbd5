"""LLM pre-judgments of a pool, measured before they are trusted: ``beir-harness judge POOL --llm openai:MODEL``.

Each (query, document) pair of a pool folder (`harness.judging.pool`) is graded 0-3 by a chat model behind
an OpenAI-compatible ``/chat/completions`` endpoint, with the UMBRELA prompt of
``harness/data/llm-judge-prompt.txt`` (its version and sha256 are recorded with every grade).

* **Politeness** is the embedding endpoints' (`harness.io.service`): `EndpointSpec.concurrency` requests
  in flight, 429/5xx/timeouts retried with backoff honouring ``Retry-After``, 401/403/404 stop at once,
  requests, retries, tokens and cost counted.
* **Malformed answers are never guessed.** An answer must be JSON with a message whose content is
  ``##final score: N`` (or the bare integer N) with N on the 0-3 scale. Anything else is counted by kind
  (``not-json``: an HTML error page or other non-JSON; ``no-answer``: JSON without a message; ``prose``: no
  final score, or several; ``out-of-scale``: a number off 0-3) and asked again, at most
  `JudgeSpec.answer_attempts` times; then the pair is left ungraded and listed.
* **The cache** (``<cache_dir>/llm-judgments/``, `harness.io.cache.remember_record`, written atomically)
  keeps each grade under (model, prompt version, prompt sha256, query text, document title and text): a
  rerun sends no request for a pair already graded, and an ungraded pair is asked again.
* **Grades are their own annotator** ``llm:MODEL``: ``judgments-llm_<model>.csv`` in the pool folder
  (``query_id,doc_id,grade,annotator``: the format ``judgments merge`` and ``judgments agreement`` read)
  and a summary ``judgments-llm_<model>.json`` (prompt, counts, malformed answers, usage, ungraded pairs).
  Nothing goes into a qrels file unless the user merges the file.
* **A calibration sample** (`JudgeSpec.sample`, ``judge --sample N``): only N pairs, stratified over the
  queries and the ranks (`harness.judging.sample`), graded into ``judgments-llm_<model>-sample.csv`` and
  written blind as ``calibration-sample.csv`` for a human; ``judgments agreement`` then compares the two
  before the whole pool is paid for (the sample's grades stay in the cache: the full run asks them no more).
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import json
import logging
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.errors import DatasetError, FormatError, HarnessError, setting
from harness.io.cache import cache_dir as default_cache_dir
from harness.io.cache import recall_record, remember_record
from harness.io.formats import atomic_writer
from harness.io.service import EndpointSpec, ServiceClient, usage_summary
from harness.judging.page import same_text
from harness.judging.sample import calibration_sample, pool_ranks, write_blind_sample
from harness.records import model_slug

logger = logging.getLogger(__name__)

LLM_PREFIX = "openai:"
ANNOTATOR_PREFIX = "llm:"
SCALE = (0, 1, 2, 3)
MALFORMED_KINDS = ("not-json", "no-answer", "prose", "out-of-scale")
CACHE_KIND = "llm-judgments"
_FINAL_SCORE = re.compile(r"##\s*final\s+score\s*:\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_BARE = re.compile(r"-?\d+(?:\.\d+)?")
_PLACEHOLDER = re.compile(r"\{(query|passage)\}")


@dataclass(frozen=True)
class JudgePrompt:
    """The prompt: its version (the file's ``# prompt version:`` line), text sent, and that text's sha256."""

    version: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def render(self, query: str, title: str, text: str) -> str:
        """The message for one pair: the passage is the title and the text (as the judging page shows them)."""
        passage = f"{title}\n{text}" if title else text
        # One pass, not str.format or two replaces: a query or document holding braces, or "{passage}", is
        # sent as it is and never steers the template.
        values = {"query": query, "passage": passage}
        return _PLACEHOLDER.sub(lambda match: values[match[1]], self.text)


def load_prompt() -> JudgePrompt:
    """The bundled UMBRELA prompt (``harness/data/llm-judge-prompt.txt``)."""
    raw = resources.files("harness").joinpath("data/llm-judge-prompt.txt").read_text(encoding="utf-8")
    lines = raw.splitlines()
    notes = 0
    while notes < len(lines) and lines[notes].startswith("# "):
        notes += 1
    version = next(line.split(":", 1)[1].strip() for line in lines[:notes] if line.startswith("# prompt version:"))
    return JudgePrompt(version, "\n".join(lines[notes:]).strip() + "\n")


class MalformedAnswer(Exception):
    """An answer that holds no grade on the scale; `kind` is one of `MALFORMED_KINDS`."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


def parse_grade(content: str) -> int:
    """The grade in a model's answer: ``##final score: N`` (exactly one), or the bare integer N, N in 0-3.

    Raises:
        MalformedAnswer: ``prose`` (no final score, or several) or ``out-of-scale`` (a number off the scale).
    """
    text = content.strip()
    found = _FINAL_SCORE.findall(text) or ([text] if _BARE.fullmatch(text) else [])
    if len(found) != 1:
        what = "no final score" if not found else f"{len(found)} final scores"
        raise MalformedAnswer("prose", f"{what} in {text[:80]!r}")
    value = found[0]
    if "." in value or int(value) not in SCALE:
        raise MalformedAnswer("out-of-scale", f"grade {value} is not one of {', '.join(map(str, SCALE))}")
    return int(value)


def answer_content(response) -> tuple[str, Mapping[str, Any]]:
    """The message content of a chat-completions answer (an httpx response), and its ``usage``.

    Raises:
        MalformedAnswer: ``not-json`` (an HTML page, plain text) or ``no-answer`` (JSON with no message).
    """
    try:
        payload = response.json()
    except ValueError:
        start = response.text[:60].strip().replace("\n", " ")
        raise MalformedAnswer("not-json", f"the answer is not JSON (starts with {start!r})") from None
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise MalformedAnswer("no-answer", f"no choices[0].message.content in {str(payload)[:80]!r}") from None
    if not isinstance(content, str):
        raise MalformedAnswer("no-answer", f"the message content is {type(content).__name__}, not text")
    return content, payload.get("usage") or {}


@dataclass(frozen=True)
class JudgeSpec:
    """How to judge.

    Attributes:
        model: The chat model, ``openai:MODEL`` (the prefix is optional here).
        endpoint: The service and its politeness (URL, key variable, concurrency, timeout, retries, price).
        answer_attempts: Questions per pair while its answers are malformed (then it is left ungraded).
        cache_dir: The cache root; None: `harness.io.cache.cache_dir`'s default.
        use_cache: Read and write the cache (off: every pair is asked, nothing stored).
        sample: Grade only a calibration sample of this many pairs (`harness.judging.sample`); None: every pair.
        sample_seed: Seeds the sample's share of the remainder.
    """

    model: str
    endpoint: EndpointSpec = field(default_factory=EndpointSpec)
    answer_attempts: int = 3
    cache_dir: Path | None = None
    use_cache: bool = True
    sample: int | None = None
    sample_seed: int = 0

    @property
    def service_model(self) -> str:
        return self.model.removeprefix(LLM_PREFIX)

    @property
    def annotator(self) -> str:
        return ANNOTATOR_PREFIX + self.service_model

    def check(self) -> None:
        """Refuse a model name or settings that cannot work, before any request.

        Raises:
            HarnessError: Naming the setting at fault.
        """
        if not self.model.startswith(LLM_PREFIX) or not self.service_model.strip():
            raise HarnessError(
                f"{setting('llm')} {self.model!r}: name the chat model as openai:MODEL (an "
                "OpenAI-compatible /chat/completions service), e.g. openai:gpt-4o-mini"
            )
        if self.answer_attempts < 1:
            raise HarnessError(f"{setting('answer_attempts')} must be at least 1, got {self.answer_attempts}")
        if self.sample is not None and self.sample < 1:
            raise HarnessError(f"{setting('sample')} {self.sample}: sample at least 1 pair, or judge the whole pool")
        self.endpoint.check()


@dataclass
class JudgeReport:
    """What a judging run did."""

    pool: Path
    annotator: str
    prompt: JudgePrompt
    pairs: int
    grades: dict[tuple[str, str], int]
    cached: int
    malformed: Counter
    ungraded: list[tuple[str, str, str]]  # (query, doc, the last answer's problem)
    usage: dict[str, Any]
    judgments_path: Path
    summary_path: Path
    sample_path: Path | None = None  # with a calibration sample: its blind copy for the human

    def summary(self) -> dict[str, Any]:
        """The JSON summary written beside the judgments."""
        return {
            "annotator": self.annotator,
            "pool": str(self.pool),
            "judgments": self.judgments_path.name,
            "prompt_version": self.prompt.version,
            "prompt_sha256": self.prompt.sha256,
            "prompt": self.prompt.text,
            "scale": list(SCALE),
            "counts": {
                "pairs": self.pairs,
                "graded": len(self.grades),
                "from_cache": self.cached,
                "asked": len(self.grades) - self.cached + len(self.ungraded),
                "ungraded": len(self.ungraded),
            },
            "malformed_answers": {kind: self.malformed.get(kind, 0) for kind in MALFORMED_KINDS},
            "usage": self.usage,
            "ungraded": [{"query_id": q, "doc_id": d, "problem": why} for q, d, why in self.ungraded],
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **({"calibration_sample": self.sample_path.name} if self.sample_path else {}),
        }

    def format_text(self, listed: int = 10) -> str:
        """A few lines: counts, malformed answers, usage, the ungraded pairs and where the grades went."""
        malformed = ", ".join(f"{n} {kind}" for kind in MALFORMED_KINDS if (n := self.malformed.get(kind, 0)))
        usage = ", ".join(f"{name} {value}" for name, value in self.usage.items())
        lines = [
            f"{self.annotator} graded {len(self.grades)} of {self.pairs} pairs of {self.pool} (prompt "
            f"{self.prompt.version}): {self.cached} from the cache, {len(self.ungraded)} ungraded",
            f"  malformed answers (each asked again, never guessed): {malformed or 'none'}",
            f"  service: {usage}",
        ]
        lines += [f"  ungraded ({q}, {d}): {why}" for q, d, why in self.ungraded[:listed]]
        if len(self.ungraded) > listed:
            lines.append(f"  ... and {len(self.ungraded) - listed} more (all in {self.summary_path.name})")
        if self.ungraded:
            lines.append("  rerun to ask the ungraded pairs again (graded pairs come from the cache)")
        if self.sample_path:
            lines.append(
                f"calibration sample of {self.pairs} pairs (every query, ranks spread): a human grades "
                f"{self.sample_path} blind (fill the grade column), then compare the two"
            )
        lines.append(
            f"-> {self.judgments_path} (annotator {self.annotator}); before trusting it: beir-harness "
            f"judgments agreement {self.judgments_path} "
            + (f"{self.sample_path} --annotator YOUR-NAME" if self.sample_path else "YOUR-JUDGMENTS.csv")
        )
        return "\n".join(lines)


def read_pool(pool_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pool folder's manifest and rows (``pool.jsonl``), checked: a 0-3 scale, rows with ids and texts.

    Raises:
        DatasetError: Not a pool folder, or a pool on another grade scale.
        FormatError: A manifest or pool line that cannot be read (naming the line).
    """
    pool_dir = Path(pool_dir)
    manifest_path, rows_path = pool_dir / "manifest.json", pool_dir / "pool.jsonl"
    if not manifest_path.is_file() or not rows_path.is_file():
        raise DatasetError(
            f"{pool_dir}: not a pool folder (no manifest.json or pool.jsonl); make one with "
            "`beir-harness pool DATASET --systems ... --out POOL`"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        grades = sorted(int(entry["grade"]) for entry in manifest.get("grade_scale", ()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FormatError(manifest_path, f"not a pool manifest ({exc})", hint="remake the pool") from None
    if tuple(grades) != SCALE:
        raise DatasetError(
            f"{manifest_path}: the pool's grade scale is {', '.join(map(str, grades))}; the LLM prompt "
            f"grades {SCALE[0]}-{SCALE[-1]} (UMBRELA): judge this pool by hand, or pool again with the "
            "default scale"
        )
    rows = []
    with open(rows_path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                rows.append(
                    {
                        name: str(row[name] if name != "title" else row.get(name) or "")
                        for name in ("query_id", "query", "doc_id", "title", "text")
                    }
                )
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise FormatError(rows_path, f"not a pool row ({exc})", line_no, "remake the pool") from None
    return manifest, rows


class Grader:
    """Asks the service for one pair's grade, again while answers are malformed (thread-safe counts)."""

    def __init__(self, spec: JudgeSpec, prompt: JudgePrompt):
        self.spec, self.prompt = spec, prompt
        self.malformed: Counter = Counter()
        self.lock = threading.Lock()
        self._client: ServiceClient | None = None

    @property
    def client(self) -> ServiceClient:
        with self.lock:  # made on the first question only: a rerun from the cache needs no service (nor httpx)
            if self._client is None:
                self._client = ServiceClient(self.spec.service_model, self.spec.endpoint, "chat/completions")
            return self._client

    def usage(self) -> dict[str, Any]:
        return self._client.usage() if self._client is not None else usage_summary(self.spec.endpoint)

    def grade(self, row: Mapping[str, str]) -> tuple[int | None, str]:
        """(grade, the answer) or (None, the last answer's problem) after `JudgeSpec.answer_attempts` questions."""
        message = self.prompt.render(row["query"], row["title"], row["text"])
        payload = {
            "model": self.spec.service_model,
            "temperature": 0,
            "messages": [{"role": "user", "content": message}],
        }
        problem = ""
        for attempt in range(1, self.spec.answer_attempts + 1):
            response = self.client.post(payload)
            try:
                content, usage = answer_content(response)
                self.client.count_tokens(usage)
                return parse_grade(content), content
            except MalformedAnswer as exc:
                with self.lock:
                    self.malformed[exc.kind] += 1
                problem = str(exc)
                logger.warning(
                    "%s: (%s, %s): malformed answer (%s), attempt %d of %d",
                    self.client.url,
                    row["query_id"],
                    row["doc_id"],
                    problem,
                    attempt,
                    self.spec.answer_attempts,
                )
        return None, problem


def cache_inputs(spec: JudgeSpec, prompt: JudgePrompt, row: Mapping[str, str]) -> dict[str, str]:
    """What decides a grade, the cache key: model, prompt version and sha256, the query and document texts."""
    return {
        "kind": "llm-judgment",
        "model": spec.service_model,
        "prompt_version": prompt.version,
        "prompt_sha256": prompt.sha256,
        "query": row["query"],
        "title": row["title"],
        "text": row["text"],
    }


def cached_grades(
    spec: JudgeSpec, prompt: JudgePrompt, rows: Sequence[Mapping[str, str]], root: Path
) -> tuple[dict[tuple[str, str], int], list[Mapping[str, str]]]:
    """(query, doc) → the grade the cache holds, and the rows it holds none for (all of them without cache)."""
    grades, todo = {}, []
    for row in rows:
        known = recall_record(root, CACHE_KIND, cache_inputs(spec, prompt, row)) if spec.use_cache else None
        grade = known.get("grade") if known else None
        if isinstance(grade, int) and not isinstance(grade, bool) and grade in SCALE:
            grades[row["query_id"], row["doc_id"]] = grade
        else:
            todo.append(row)
    return grades, todo


def ask_all(grader: Grader, rows: Sequence[Mapping[str, str]], root: Path) -> list[tuple[int | None, str]]:
    """Each row's (grade, answer) or (None, problem), `EndpointSpec.concurrency` at a time; each grade is cached
    as soon as it is had. The first refusal (401, 429 after every retry) stops the run: no more pairs asked."""
    spec, stop = grader.spec, threading.Event()

    def ask(row: Mapping[str, str]) -> tuple[int | None, str]:
        if stop.is_set():
            return None, "not asked: the run stopped"
        try:
            grade, answer = grader.grade(row)
        except BaseException:
            stop.set()
            raise
        if grade is not None and spec.use_cache:  # only a grade is kept: a malformed answer is asked again
            remember_record(
                root, CACHE_KIND, cache_inputs(spec, grader.prompt, row), {"grade": grade, "answer": answer[:500]}
            )
        return grade, answer

    with ThreadPoolExecutor(max_workers=spec.endpoint.concurrency) as workers:
        futures = [workers.submit(ask, row) for row in rows]
        try:
            return [future.result() for future in futures]
        except BaseException:  # the refusal, or Ctrl-C: the grades already had are in the cache
            stop.set()
            raise


def judge_pool(pool_dir: str | Path, spec: JudgeSpec, prompt: JudgePrompt | None = None) -> JudgeReport:
    """Grade every pair of a pool folder with an LLM (see the module docstring) and write its judgments file.

    Returns:
        The `JudgeReport` (also written as ``judgments-llm_<model>.json``).

    Raises:
        HarnessError: A bad model name or setting, not a pool folder, a pool not on 0-3, a refusing or failing
            service (401, 404, still 429 after every retry...); the judgments file is then not written.
    """
    spec.check()
    pool_dir, prompt = Path(pool_dir), prompt or load_prompt()
    manifest, rows = read_pool(pool_dir)
    copies = same_text(rows)  # a document with the text of another of its query is asked once, as that one
    sample_path = None
    if spec.sample is not None:  # the twins are left out: each sampled pair is asked itself
        rows = [r for r in rows if (r["query_id"], r["doc_id"]) not in copies]
        rows, copies = calibration_sample(rows, pool_ranks(pool_dir, manifest), spec.sample, spec.sample_seed), {}
        sample_path = pool_dir / "calibration-sample.csv"
    root = default_cache_dir(spec.cache_dir)
    grader = Grader(spec, prompt)
    grades, todo = cached_grades(spec, prompt, [r for r in rows if (r["query_id"], r["doc_id"]) not in copies], root)
    cached = len(grades)
    ungraded = []
    for row, (grade, answer) in zip(todo, ask_all(grader, todo, root)):
        if grade is None:
            ungraded.append((row["query_id"], row["doc_id"], answer))
        else:
            grades[row["query_id"], row["doc_id"]] = grade
    for (query_id, doc_id), shown in copies.items():
        if (query_id, shown) in grades:
            grades[query_id, doc_id] = grades[query_id, shown]
    slug = model_slug(spec.annotator) + ("-sample" if sample_path else "")
    report = JudgeReport(
        pool_dir,
        spec.annotator,
        prompt,
        len(rows),
        grades,
        cached,
        grader.malformed,
        sorted(ungraded),
        grader.usage(),
        pool_dir / f"judgments-{slug}.csv",
        pool_dir / f"judgments-{slug}.json",
        sample_path,
    )
    if sample_path:
        write_blind_sample(pool_dir, rows)
    write_judgments(report)
    return report


def write_judgments(report: JudgeReport) -> None:
    """The judgments CSV (sorted by query and document) and the JSON summary, each written atomically."""
    with atomic_writer(report.judgments_path) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(("query_id", "doc_id", "grade", "annotator"))
        writer.writerows((q, d, g, report.annotator) for (q, d), g in sorted(report.grades.items()))
    with atomic_writer(report.summary_path) as handle:
        handle.write(json.dumps(report.summary(), indent=2, ensure_ascii=False) + "\n")
