"""Lazy exports of a package namespace (SPEC 1, the scientific-Python convention of scipy and scikit-image).

A package ``__init__`` declares one table ``_LAZY = {"public name": "module.defining.it", ...}`` and ends with::

    __all__ = list(_LAZY)
    __getattr__, __dir__ = attach(__name__, _LAZY)

``import package`` then imports none of the table's modules; ``package.name`` (or
``from package import name``) imports ``_LAZY[name]`` on first access and caches the object
in the package namespace, so later lookups are plain attribute reads. ``dir(package)`` lists
every exported name, loaded or not. The ``lazy_loader`` package does the same from a ``.pyi``
stub; these few lines avoid the extra dependency and keep the table in one place.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["attach"]


def attach(package: str, table: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` for the lazy ``table``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    table : mapping of str to str
        Public name -> the module that defines it (imported on the first access to the name).

    Returns
    -------
    tuple of two callables
        ``(__getattr__, __dir__)``, to assign at the package's module level.
    """

    def __getattr__(name: str) -> object:
        try:
            module = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups bypass __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
