"""Named derived values and named sets: a rule that reads a name behaves as if the expression were
written inline (same value, same flags and facts read), and bad definitions fail at load time."""

import textwrap

import pytest

from accord.resolver.errors import UsageError
from accord.resolver.language.derived import load_derived
from accord.resolver.language.expr import parse
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruleset import load_rules
from tests.test_expr import Env  # the expression tests' environment: flags and facts


def _write(tmp_path, text):
    folder = tmp_path / "llm"
    folder.mkdir()
    (folder / "derived.yaml").write_text(textwrap.dedent(text))
    return tmp_path


DERIVED = """
    sets:
      - {id: big_sizes, values: [8, 16], reason: sizes}
    derived:
      - id: blackwell
        type: bool
        values: [{value: "platform == 'cuda' and gpu.sm in (100, 103)"}]
        reason: a Blackwell GPU
      - id: chunk
        type: int
        values:
          - {value: 8192, when: "blackwell and tp_size in big_sizes"}
          - {value: 4096, when: "blackwell"}
          - {value: 2048}
        reason: chunk size
"""


def test_a_derived_value_is_the_first_case_whose_condition_holds(tmp_path):
    derived, sets = load_derived("llm", _write(tmp_path, DERIVED))
    names = {s.id: parse(repr(list(s.values))) for s in sets} | {d.id: d.expr for d in derived}
    chunk = parse("chunk", names)
    blackwell = {"platform": "cuda", "gpu.sm": 100}
    assert chunk(Env({"tp_size": 8}, blackwell)) == 8192
    assert chunk(Env({"tp_size": 2}, blackwell)) == 4096
    assert chunk(Env({"tp_size": 8}, {"platform": "rocm"})) == 2048
    assert derived[1].deciding_case(Env({"tp_size": 2}, blackwell)) == 1


def test_a_reader_depends_on_what_the_derived_value_reads(tmp_path):
    derived, sets = load_derived("llm", _write(tmp_path, DERIVED))
    names = {d.id: d.expr for d in derived}
    expr = parse("chunk > 0", names)
    assert expr.flags == {"tp_size"} and expr.facts == {"platform", "gpu.sm"}
    assert expr.names == {"chunk", "blackwell", "big_sizes"}


def test_an_unknown_fact_read_through_a_name_stays_unknown(tmp_path):
    derived, _ = load_derived("llm", _write(tmp_path, DERIVED))
    with pytest.raises(UnknownFact):
        parse("blackwell", {"blackwell": derived[0].expr})(Env({}, {"platform": "cuda"}))


@pytest.mark.parametrize("entry", [
    "{id: x, type: bool, values: [{value: 1, when: a}, {value: 2}], reason: r, history: h}",
    "{id: x, type: number, values: [{value: 1}], reason: r}",
    "{id: x, type: int, values: [{value: 1}, {value: 2}], reason: r}",
    "{id: x, type: int, values: [{value: 1}]}",
    "{id: x, type: int, values: [{value: 'a +'}], reason: r}",
])
def test_a_malformed_derived_value_is_a_usage_error(tmp_path, entry):
    with pytest.raises(UsageError):
        load_derived("llm", _write(tmp_path, f"derived:\n  - {entry}\n"))


def test_the_shipped_derived_values_load_and_rules_read_them():
    ruleset = load_rules("llm")
    assert {d.id for d in ruleset.derived} >= {"sm100_cuda128"}
    readers = [r for r in ruleset if any("sm100_cuda128" in e.names for e in r.expressions())]
    assert readers and all({"platform", "gpu.sm", "cuda"} <= r.reads_facts for r in readers)
