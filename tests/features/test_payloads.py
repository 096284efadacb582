"""Payloads are JSON and round-trip exactly on every backend; backoff is a pure, bounded function."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leased import Backoff, ConfigurationError, PayloadError
from leased.payloads import Unreadable, clean_text, decode, encode_arguments

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(json_values, max_size=3), kwargs=st.dictionaries(st.text(max_size=8), json_values, max_size=3))
def test_any_json_payload_round_trips_exactly(app, args, kwargs):
    echo = app.tasks.get("echo") or app.task(name="echo")(lambda *args, **kwargs: None)
    job = echo.enqueue(*args, **kwargs)
    stored = app.get_job(job.id)
    assert (stored.args, stored.kwargs) == (args, kwargs)
    assert list(stored.kwargs) == list(kwargs)  # key order too


@given(value=json_values, indent=st.sampled_from([None, 1]), padding=st.sampled_from(["", " ", "\n"]))
def test_stored_json_decodes_as_json_loads_reads_it(value, indent, padding):
    text = padding + json.dumps(value, indent=indent) + padding
    assert decode(text) == json.loads(text)


@pytest.mark.parametrize("text", ["[1", "[1]x", "x", "", "{'a': 1}"])
def test_stored_text_that_is_not_json_decodes_as_unreadable(text):
    decoded = decode(text)
    assert isinstance(decoded, Unreadable) and decoded.text == text
    assert "line 1" in decoded.error  # json's own account of where it stopped


@given(attempt=st.integers(min_value=1, max_value=10_000), u=st.floats(min_value=0, max_value=1))
def test_backoff_is_bounded_and_grows(attempt, u):
    backoff = Backoff(base=1, factor=2, cap=600, jitter=0.25)
    delay = backoff.delay(attempt, uniform=lambda: u)
    assert 0 <= delay <= 600 * 1.25
    if attempt < 9:
        assert backoff.delay(attempt, lambda: 0.5) < backoff.delay(attempt + 1, lambda: 0.5)


def test_backoff_without_jitter_is_exact():
    backoff = Backoff(base=2, factor=3, cap=100, jitter=0)
    assert [backoff.delay(n) for n in (1, 2, 3, 4, 5)] == [2, 6, 18, 54, 100]


@pytest.mark.parametrize("options", [{"base": -1}, {"factor": 0.5}, {"jitter": 2}])
def test_backoff_refuses_nonsense(options):
    with pytest.raises(ConfigurationError):
        Backoff(**options)


def test_error_text_is_stored_clean_and_capped():
    assert clean_text("a\x00b", 100) == "a\\x00b"
    long = clean_text("x" * 10_000 + "END", 1000)
    assert len(long) < 1100 and long.endswith("END") and "characters cut" in long


def _circular() -> list:
    inner: list = []
    inner.append(inner)
    return inner


@pytest.mark.parametrize("args, kwargs, message", [
    ((1, object()), {}, r"^argument 1 \(object\) is not JSON-serializable"),
    ((1, _circular()), {}, r"^argument 1 \(list\) is not JSON-serializable \(Circular reference detected\)"),
    ((), {"a": {"b": _circular()}}, r"^keyword argument 'a' \(dict\) is not JSON-serializable \(Circular reference"),
    ((float("nan"),), {"a": object()}, r"^argument 0 \(float\)"),
    (([1, {2, 3}],), {}, r"^argument 0 \(list\)"),
    ((), {"a": 1, "b": float("inf")}, r"^keyword argument 'b' \(float\)"),
    ((), {"a": 1, 2: "x"}, r"^keyword argument names must be strings, got 2$"),
    ((), {"a": object(), 2: "x"}, r"^keyword argument 'a' \(object\)"),
    ((), {(1, 2): "x"}, r"^keyword argument names must be strings, got \(1, 2\)$"),
])
def test_the_first_argument_that_cannot_be_stored_is_named(args, kwargs, message):
    with pytest.raises(PayloadError, match=message):
        encode_arguments(args, kwargs, 1000)


def test_a_dict_key_that_is_not_a_str_is_refused_at_enqueue_not_stored_as_one(app):
    echo = app.task(name="echo")(lambda *args, **kwargs: None)
    with pytest.raises(PayloadError) as error:
        echo.enqueue({1: "a"})  # json would store {"1": "a"}, and the handler would get another dict
    assert str(error.value) == ("argument 0 has the key 1 (int), but JSON objects have str keys only: it would "
                                "arrive as '1'; make the keys strings, or pass a list of pairs")
    with pytest.raises(PayloadError, match=r"^keyword argument 'rows'\[0\]\['by_day'\] has the key None \(NoneType\)"
                                           r".* it would arrive as 'null';"):
        echo.enqueue(rows=[{"by_day": {None: 1}}])
    with pytest.raises(PayloadError, match=r"^argument 1 has the key True"):
        echo.enqueue_many([("fine", {"{": 1}), ("x", {True: 1})])  # a brace in a str is no object
    assert app.list_jobs() == []
    job = echo.enqueue({"1": "a"}, note="{not an object}")
    assert app.get_job(job.id).args == [{"1": "a"}]


def test_arguments_encode_compactly_and_keep_unicode():
    encoded = encode_arguments((1, "é", [None, True]), {"k": {"x": 1.5}}, 1000)
    assert encoded == ('[1,"é",[null,true]]', '{"k":{"x":1.5}}')
    assert encode_arguments((), {}, 1000) == ("[]", "{}")
