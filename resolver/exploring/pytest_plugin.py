"""pytest plugin: `pytest --accord-matrix matrix.json` runs each test taking `accord_row` once per row.

The file is what `accord matrix` printed (`--format json`, `yaml` or `github`); each row is a
legal configuration, resolved when the matrix was made, with its facts preset, its model, its
launch flags (`argv`, `args`) and its config hash. Without the option such tests are skipped, so a
suite can hold them and run them only in the CI jobs that have a matrix.

Registered through the `pytest11` entry point in pyproject.toml (or `-p accord.resolver.exploring.pytest_plugin`).
Importing it imports nothing but pytest: the matrix file is read only when a test asks for rows.
"""

from __future__ import annotations

import pytest

ROW_ARGUMENT = "accord_row"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("accord")
    group.addoption("--accord-matrix", metavar="SPEC", default=None,
                    help=f"run each test that takes `{ROW_ARGUMENT}` once per row of this matrix file "
                         "(the json, yaml or github output of `accord matrix`)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if ROW_ARGUMENT not in metafunc.fixturenames:
        return
    spec = metafunc.config.getoption("accord_matrix")
    if spec is None:
        skip = pytest.mark.skip(reason="no matrix: run pytest with --accord-matrix FILE")
        metafunc.parametrize(ROW_ARGUMENT, [pytest.param(None, marks=skip)], ids=["no-matrix"])
        return
    from accord.resolver.errors import AccordError
    from accord.resolver.exploring.testing import matrix_rows, row_id

    try:
        names, rows = matrix_rows(spec)
    except AccordError as err:
        raise pytest.UsageError(str(err)) from None
    metafunc.parametrize(ROW_ARGUMENT, [pytest.param(row, id=row_id(row, names)) for row in rows])
