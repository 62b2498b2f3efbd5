"""The LLM judge's cache key and answer parser (mutation testing: docs/mutation-report.md).

The cache key must hold every input that decides a grade: a grade stored for one model, prompt version,
prompt text, query, title or passage text must never be served when any one of them changes. Each field
is changed in turn; the reference is the list of fields written here and hashlib's sha256 of the prompt.
"""

from __future__ import annotations

import hashlib

import pytest

from harness.io.cache import recall_record, remember_record
from harness.judging.llm import (
    CACHE_KIND,
    JudgePrompt,
    JudgeSpec,
    MalformedAnswer,
    cache_inputs,
    cached_grades,
    parse_grade,
)

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
