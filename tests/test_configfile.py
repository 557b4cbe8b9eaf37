"""Reading `--config` files: flat YAML or JSON mappings, with the line of every key and of every error."""

from __future__ import annotations

import pytest

from accord.resolver.commandline.configfile import ConfigEntry, read_config
from accord.resolver.errors import UsageError


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_yaml_entries_keep_file_order_values_and_lines(tmp_path):
    path = _write(tmp_path, "c.yaml", "# comment\ntp-size: 2\ncuda_graph_bs:\n  - 1\n  - 2\nrevision: null\n")
    assert read_config(path) == [ConfigEntry("tp-size", 2, 2), ConfigEntry("cuda_graph_bs", [1, 2], 3),
                                 ConfigEntry("revision", None, 6)]


def test_json_entries_keep_file_order_values_and_lines(tmp_path):
    path = _write(tmp_path, "c.json", '{\n  "tp_size": 2,\n\n  "enable-dp-attention": true\n}\n')
    assert read_config(path) == [ConfigEntry("tp_size", 2, 2), ConfigEntry("enable-dp-attention", True, 4)]


def test_an_empty_file_sets_nothing(tmp_path):
    assert read_config(_write(tmp_path, "c.yaml", "")) == []
    assert read_config(_write(tmp_path, "c.json", "  ")) == []


@pytest.mark.parametrize("name, text, prefix", [
    ("c.yaml", "tp_size: 2\n  bad: [\n", "config file {path}, line 2: malformed YAML: "),
    ("c.json", '{\n  "tp_size": 2,\n}\n', "config file {path}, line 3: malformed JSON: "),
])
def test_syntax_errors_name_the_file_and_line(tmp_path, name, text, prefix):
    # The parser's own wording of the problem varies across library versions: the prefix is pinned.
    path = _write(tmp_path, name, text)
    with pytest.raises(UsageError) as err:
        read_config(path)
    assert str(err.value).startswith(prefix.format(path=path))


@pytest.mark.parametrize("name, text, message", [
    ("c.yaml", "- tp_size\n", "config file {path}, line 1: expected a mapping of flag: value pairs at the top level."),
    ("c.json", "[1]", "config file {path}, line 1: expected an object of flag: value pairs at the top level."),
    ("c.yaml", "tp_size: 1\ntp_size: 2\n", "config file {path}, line 2: key 'tp_size' is given twice."),
    ("c.json", '{"tp_size": 1,\n "tp_size": 2}', "config file {path}, line 2: key 'tp_size' is given twice."),
])
def test_files_that_are_not_one_flat_mapping_name_the_file_and_line(tmp_path, name, text, message):
    path = _write(tmp_path, name, text)
    with pytest.raises(UsageError) as err:
        read_config(path)
    assert str(err.value) == message.format(path=path)


def test_an_unreadable_file_is_named(tmp_path):
    path = str(tmp_path / "missing.yaml")
    with pytest.raises(UsageError) as err:
        read_config(path)
    assert str(err.value) == f"cannot read config file {path}: No such file or directory."


@pytest.mark.parametrize("text, line", [
    ("tp_size: 2\nmodel_path: !!python/object/apply:os.system [ls]\n", 2),
    ("tp_size: !custom 4\n", 1),
])
def test_object_building_yaml_tags_are_refused_with_file_and_line(tmp_path, text, line):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        read_config(str(path))
    assert str(err.value).startswith(f"config file {path}, line {line}: unsupported YAML tag")
