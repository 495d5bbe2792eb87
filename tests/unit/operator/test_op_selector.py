"""Label selectors validated as the API server does, and only then written as a query.

The wording and the accept/refuse decisions follow apimachinery's ValidateLabelSelector;
tests/e2e/test_operator_tenancy.py checks the same cases against the real API server.
"""

import pytest

from kubeprof.operator.selector import key_problem, to_query, validate, value_problem


def test_query_string_of_every_operator():
    sel = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["y", "x"]},
            {"key": "gpu", "operator": "Exists"},
            {"key": "old", "operator": "DoesNotExist"},
            {"key": "env", "operator": "NotIn", "values": ["dev"]},
        ],
    }
    assert validate(sel, "s") == []
    assert to_query(sel) == "a=1,b=2,tier in (x,y),gpu,!old,env notin (dev)"


@pytest.mark.parametrize(
    "key", ["app", "example.com/tier", "a", "A_b.c-9", "k8s.io/" + "n" * 63, "x" * 253 + "/a"]
)
def test_valid_keys(key):
    assert key_problem(key) is None


@pytest.mark.parametrize(
    ("key", "words"),
    [
        (" ", "name part must consist of"),
        ("", "name part must be non-empty"),
        ("a b", "name part must consist of"),
        ("-a", "name part must consist of"),
        ("a,b", "name part must consist of"),
        ("/a", "prefix part must be non-empty"),
        ("a/", "name part must be non-empty"),
        ("a/b/c", "more than one '/'"),
        ("Example.com/a", "prefix part must be a lowercase DNS subdomain"),
        ("n" * 64, "no more than 63 characters"),
        ("x" * 254 + "/a", "no more than 253 characters"),
    ],
)
def test_invalid_keys_say_why(key, words):
    assert words in (key_problem(key) or "")


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        ("v1.2_x-y", True),
        ("v" * 63, True),
        ("v" * 64, False),
        (" ", False),
        ("a b", False),
        ("-a", False),
        ("a,b", False),
        ("a)", False),
    ],
)
def test_label_values(value, ok):
    assert (value_problem(value) is None) is ok


def test_the_space_key_with_exists_is_refused_not_turned_into_match_everything():
    sel = {"matchExpressions": [{"key": " ", "operator": "Exists"}]}
    problems = validate(sel, "spec.target.podSelector")
    assert [p.path for p in problems] == ["spec.target.podSelector.matchExpressions[0].key"]
    assert "Invalid value: ' '" in problems[0].problem
    with pytest.raises(ValueError):
        to_query(sel)


def test_empty_match_labels_key_is_refused_naming_the_field():
    problems = validate({"matchLabels": {"": "a"}}, "spec.target.podSelector")
    assert str(problems[0]).startswith("spec.target.podSelector.matchLabels: Invalid value: ''")


@pytest.mark.parametrize(
    ("req", "path", "words"),
    [
        ({"key": "a", "operator": "In"}, "values", "must be specified when `operator` is 'In'"),
        ({"key": "a", "operator": "NotIn", "values": []}, "values", "must be specified"),
        ({"key": "a", "operator": "Exists", "values": ["x"]}, "values", "may not be specified"),
        ({"key": "a", "operator": "Gt", "values": ["1"]}, "operator", "Unsupported value: 'Gt'"),
        ({"key": "a", "operator": "In", "values": ["ok", "no way"]}, "values[1]", "label value"),
        ({"operator": "Exists"}, "key", "Required value"),
    ],
)
def test_requirement_problems(req, path, words):
    problems = validate({"matchExpressions": [req]}, "sel")
    assert problems and problems[0].path == f"sel.matchExpressions[0].{path}"
    assert words in problems[0].problem


def test_values_that_are_not_strings_are_named():
    problems = validate({"matchLabels": {"gpu": True}}, "sel")
    assert problems[0].path == "sel.matchLabels.gpu" and "strings" in problems[0].problem
