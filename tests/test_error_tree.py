"""One error tree: every error tapgate raises on purpose is a class of ``domain/errors.py``, drawn in its
docstring and in docs/architecture.md, with a code of its own family."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import tapgate
from tapgate.domain import errors
from tapgate.domain.errors import TapgateError

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _every_module_loaded() -> None:
    for module in pkgutil.walk_packages(tapgate.__path__, "tapgate."):
        if module.name.endswith("__main__") or ".migrations." in module.name or ".bench" in module.name:
            continue
        importlib.import_module(module.name)


def _tree() -> list[type[TapgateError]]:
    found: list[type[TapgateError]] = []
    waiting = [TapgateError]
    while waiting:
        cls = waiting.pop()
        found.append(cls)
        waiting.extend(cls.__subclasses__())
    return found


def test_every_error_class_of_tapgate_lives_in_the_error_tree_module() -> None:
    _every_module_loaded()
    elsewhere = sorted(f"{c.__module__}.{c.__name__}" for c in _tree() if c.__module__ != errors.__name__)
    assert elsewhere == []


def test_the_tree_is_drawn_whole_in_its_docstring_and_in_the_architecture_page() -> None:
    names = {c.__name__ for c in _tree() if c.__module__ == errors.__name__}
    assert errors.__doc__ is not None
    drawn_here = set(re.findall(r"[├└]── (\w+)", errors.__doc__)) | {"TapgateError"}
    page = ARCHITECTURE.read_text(encoding="utf-8")
    drawing = page[page.index("TapgateError                 code") :]
    drawing = drawing[: drawing.index("```")]
    drawn_there = set(re.findall(r"[├└]── (\w+)", drawing)) | {"TapgateError"}
    assert drawn_here == names
    assert drawn_there == names
    for cls in _tree():  # the page gives each class its code
        assert re.search(rf"── {cls.__name__}\s+{cls.code}\s", drawing) or cls is TapgateError, cls.__name__


def test_the_architecture_page_counts_the_import_contracts_there_are() -> None:
    config = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    contracts = config.count("[[tool.importlinter.contracts]]")
    words = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    assert f"import-linter with {words[contracts]} contracts" in ARCHITECTURE.read_text(encoding="utf-8")
