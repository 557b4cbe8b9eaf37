"""A YAML syntax error names the line a person would fix, in every file Accord reads.

The parser often notices a mistake at the next token: a key missing its colon on line 2 was reported
as line 3 (or later, past blank lines and comments), a quote or bracket never closed as the line after
the end of the file. Each file below has its mistake on a known line, counted as an editor counts.
"""

from __future__ import annotations

import re

import pytest
import yaml

from accord.resolver.commandline.configfile import read_config
from accord.resolver.errors import UsageError
from accord.resolver.facts.machine import load_facts
from accord.resolver.language.yamlcache import parse_documents
from accord.resolver.language.yamlerrors import problem_line

# (the file, the line of its mistake)
MISTAKES = [
    pytest.param("tp_size: 2\nbad line\ndp_size: 1\n", 2, id="key-without-colon"),
    pytest.param("tp_size: 2\nbad line\n", 2, id="key-without-colon-last-line"),
    pytest.param("tp_size: 2\nbad line\n\n# a note\ndp_size: 1\n", 2, id="key-without-colon-before-blank-and-comment"),
    pytest.param("tp_size: 2\r\nbad line\r\ndp_size: 1\r\n", 2, id="key-without-colon-crlf"),
    pytest.param("tp_size: 2\nmodel_path: 'abc\ndp_size: 1\n", 2, id="quote-never-closed"),
    pytest.param('tp_size: 2\nmodel_path: "abc', 2, id="quote-never-closed-no-newline"),
    pytest.param("tp_size: 2\ncuda_graph_bs: [1, 2\n", 2, id="bracket-never-closed"),
    pytest.param("tp_size: 2\nextra: {a: 1\n\n", 2, id="brace-never-closed"),
    pytest.param("model_path: 'x\n", 1, id="first-line"),
    pytest.param("tp_size: 2\n  dp_size: 3\nnnodes: 1\n", 2, id="indented-key"),
    pytest.param("tp_size: 2\ndp_size: 1\n- x\n", 3, id="list-item-in-a-mapping"),
    pytest.param("tp_size: 2\ndp_size: *nope\n", 2, id="undefined-alias"),
    pytest.param("tp_size: 2\n\tdp_size: 3\n", 2, id="tab-indent"),
]


def _named_line(message: str) -> int:
    found = re.search(r"line (\d+)", message)
    assert found, message
    return int(found.group(1))


@pytest.mark.parametrize("loader", ["SafeLoader", "CSafeLoader"])
@pytest.mark.parametrize("text, line", MISTAKES)
def test_problem_line_is_the_line_of_the_mistake_with_either_parser(text, line, loader):
    if not hasattr(yaml, loader):
        pytest.skip("PyYAML built without libyaml")
    with pytest.raises(yaml.YAMLError) as err:
        list(yaml.load_all(text, Loader=getattr(yaml, loader)))
    assert problem_line(err.value, text) == line


@pytest.mark.parametrize("text, line", MISTAKES)
def test_a_config_file_error_names_the_line_of_the_mistake(tmp_path, text, line):
    path = tmp_path / "launch.yaml"
    path.write_bytes(text.encode())
    with pytest.raises(UsageError) as err:
        read_config(str(path))
    assert str(err.value).startswith(f"config file {path}, line {line}: malformed YAML")


@pytest.mark.parametrize("text, line", MISTAKES)
def test_a_facts_file_error_names_the_line_of_the_mistake(tmp_path, text, line):
    path = tmp_path / "facts.yaml"
    path.write_bytes(("preset: h100\n" + text).encode())
    with pytest.raises(UsageError) as err:
        load_facts(str(path))
    assert str(err.value).startswith(f"{path}, line {line + 1}: not valid YAML")


@pytest.mark.parametrize("text, line", MISTAKES)
def test_a_rule_file_error_names_the_line_of_the_mistake(tmp_path, text, line):
    path = tmp_path / "rules.yaml"
    with pytest.raises(UsageError) as err:
        parse_documents(path, text)
    assert _named_line(str(err.value)) == line
