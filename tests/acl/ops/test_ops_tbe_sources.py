"""The hand-written TBE kernels compile as Python and depend only on the CANN toolkit.

They cannot run here (no ``tbe``/``te``); compiling them catches syntax errors, and the import
check keeps them loadable by ATC's TBE compiler, which imports the file from the installed op
package where edgefuse is not on the path.
"""

from __future__ import annotations

import ast
import importlib.resources
import sys

import pytest

from edgefuse.acl.ops.registry import ALL_OPS

pytestmark = pytest.mark.unit

ops = pytest.mark.parametrize("spec", ALL_OPS, ids=lambda spec: spec.name)


@ops
def test_kernel_compiles_as_python(spec):
    source = spec.kernel_source()
    compile(source, spec.kernel_path, "exec")


@ops
def test_kernel_imports_only_the_toolkit_and_the_standard_library(spec):
    tree = ast.parse(spec.kernel_source())
    modules = {
        alias.name if isinstance(node, ast.Import) else node.module
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    roots = {module.split(".")[0] for module in modules}
    assert roots - set(sys.stdlib_module_names) <= {"tbe", "te"}, roots


@ops
def test_kernel_ships_as_package_data_next_to_its_spec(spec):
    resource = importlib.resources.files(spec.package) / spec.kernel_path
    assert resource.is_file()
    assert spec.kernel_path == f"tbe/impl/{spec.kernel_name}.py"


@ops
def test_kernel_has_a_module_docstring(spec):
    assert ast.get_docstring(ast.parse(spec.kernel_source())).startswith(spec.ascend_type)
