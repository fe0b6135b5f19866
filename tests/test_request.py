"""The export's request (``core/request.py``) against the options' declarations
(``core/options.py``): every REQUEST option is a field of the same name, with the default
the command line gives it, and no field is stray."""

import dataclasses

from pteforge.core.options import OPTIONS, REQUEST, option
from pteforge.core.request import ALSO_READ, ExportRequest, first_duplicate

FIELDS = {f.name: f for f in dataclasses.fields(ExportRequest)}


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def test_every_request_option_is_a_field_and_no_field_is_stray():
    declared = {o.name for o in OPTIONS if o.role == REQUEST}
    assert declared - set(FIELDS) == set(), "a REQUEST option without its field"
    assert set(FIELDS) - declared - set(ALSO_READ) == {"families"}, "a field that is no REQUEST option"
    for name in ALSO_READ:  # an option of another role, read by the request too
        assert option(name).role != REQUEST and name in FIELDS


def test_each_field_defaults_as_the_command_line_does():
    for o in OPTIONS:
        if o.name in FIELDS:
            assert _default(FIELDS[o.name]) == ([] if o.kind == "append" else o.default), o.name
    assert _default(FIELDS["families"]) == {}


def test_the_request_is_frozen_and_built_from_option_values():
    request = ExportRequest.from_options({"backends": ["xnnpack"], "model": ["m.py:f"], "yolo": [], "mobilenet": None,
                                          "out": "models", "llm": None}, ["yolo", "mobilenet"])
    assert request.backends == ["xnnpack"] and request.model == ["m.py:f"] and request.llm == []
    assert request.families == {"yolo": [], "mobilenet": None}
    try:
        request.all = True
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("the request is frozen")


def test_first_duplicate_finds_two_different_things_of_one_name():
    assert first_duplicate(["a", "b", "a"], str.upper) is None, "the same thing twice is no duplicate"
    assert first_duplicate(["a", "b", "A"], str.lower) == (0, 2)
    assert first_duplicate(["x", "y"], lambda _: None) is None, "no name, no duplicate"
    assert first_duplicate([1, 2, {"n": 1}], lambda _: "n", lambda a, b: isinstance(b, dict)) == (0, 2)
