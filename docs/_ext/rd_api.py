"""Sphinx extension: the API reference generated from the packages' ``__all__``.

Directives
----------
``.. public-api:: PACKAGE``
    With ``:group: SUBPACKAGE`` (e.g. ``dynamics``), documents the names of
    ``PACKAGE.__all__`` defined in ``PACKAGE.SUBPACKAGE`` (or in the module
    ``PACKAGE.SUBPACKAGE``), one summary table and one section per defining
    module, under their public names (``reduced_dynamics.approx_loss``).
    Without ``:group:``, documents every name of ``PACKAGE.__all__``.
``.. module-api:: MODULE``
    Documents ``MODULE.__all__`` under the module's own path (for modules whose
    names are not exported at the top level, such as the figure registry);
    names that the top-level packages export are linked, not repeated.

Every name of ``reduced_dynamics.__all__`` must land on some ``public-api``
page: at the end of reading, a name that no group claimed is a warning (an
error under ``-W``), so a newly exported name cannot go undocumented.

Cross-references
----------------
Docstrings may refer to an object by any path that imports it
(``reduced_dynamics.flow._integrate.integrate``) or by a bare public name
(``Setting``); the ``missing-reference`` handler resolves such a reference to
the page where the same object is documented. A reference to an object that
is documented nowhere is still reported (nitpicky mode).

``docs/theory.md#anchor`` in a docstring becomes a link to that section of
the theory page; an anchor that does not exist is reported.

Every top-level public function must document all its parameters and have a
Returns section (numpydoc checks PR01, RT01); otherwise the build warns.
"""

from __future__ import annotations

import importlib
import inspect
import re

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import make_refnode, nested_parse_with_titles

logger = logging.getLogger(__name__)

#: packages whose ``__all__`` is the public API
PACKAGES = ("reduced_dynamics", "proofs_check")


def _defining_module(package: str, name: str) -> str:
    """The module that defines ``package.name`` (for data: the submodule that assigns it)."""
    obj = getattr(importlib.import_module(package), name)
    mod = getattr(obj, "__module__", None)
    if (inspect.isclass(obj) or inspect.isroutine(obj)) and mod:
        return mod
    # data (constants, dicts): the first submodule whose namespace holds the same object and whose
    # source assigns the name
    pattern = re.compile(rf"^{re.escape(name)}\s*(:[^=]*)?=", re.M)
    for modname, module in sorted(_submodules(package).items()):
        if module.__dict__.get(name) is obj:
            try:
                src = inspect.getsource(module)
            except (OSError, TypeError):
                continue
            if pattern.search(src):
                return modname
    return package


def _submodules(package: str) -> dict:
    import pkgutil

    pkg = importlib.import_module(package)
    out = {package: pkg}
    for info in pkgutil.walk_packages(pkg.__path__, prefix=package + "."):
        if info.name.endswith("__main__"):  # importing it would run the command line
            continue
        try:
            out[info.name] = importlib.import_module(info.name)
        except Exception:  # a module that cannot be imported is reported by autodoc, not here
            continue
    return out


def _objtype(obj) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isroutine(obj):
        return "function"
    return "data"


def _render(qualified: list[tuple[str, object]], relative: bool = False) -> list[str]:
    """reST for one block: an autosummary table, then the autodoc entries.

    ``qualified`` holds (name, object) pairs; names are full paths, or relative to the current
    module when ``relative``.
    """
    lines = [".. autosummary::", "   :nosignatures:", ""]
    lines += [f"   {q}" if relative else f"   ~{q}" for q, _ in qualified]
    lines.append("")
    for q, obj in qualified:
        kind = _objtype(obj)
        if kind in ("class", "exception"):
            lines += [f".. auto{kind}:: {q}", "   :members:", ""]
        elif kind == "function":
            lines += [f".. autofunction:: {q}", ""]
        else:
            lines += [f".. autodata:: {q}", "   :no-value:", ""]
    return lines


def _claimed(env) -> set:
    if not hasattr(env, "rd_api_claimed"):
        env.rd_api_claimed = {}
    return env.rd_api_claimed


class PublicApi(SphinxDirective):
    required_arguments = 1
    option_spec = {"group": directives.unchanged, "reexported-from": directives.unchanged}

    def run(self):
        package = self.arguments[0]
        if "reexported-from" in self.options:
            return self._reexported(package, self.options["reexported-from"])
        group = self.options.get("group")
        pkg = importlib.import_module(package)
        prefix = f"{package}.{group}" if group else package
        public: dict[str, list] = {}  # defining module -> top-level names
        for name in pkg.__all__:
            public.setdefault(_defining_module(package, name), []).append(name)
        modules = sorted(
            m
            for m in _submodules(package)
            if (m == prefix or m.startswith(prefix + "."))
            and (group or m != package)
            and (m in public or not any(part.startswith("_") for part in m.split(".")))
        )
        reexported = [n for m, ns in public.items() if not (m == package or m.startswith(package + ".")) for n in ns]
        if group is None:  # the whole package is the group: its own top-level names come first
            modules = [package, *modules]
        elif not modules:
            logger.warning(f"public-api: no module {prefix}", location=self.get_location())
            return []
        exported = {id(getattr(pkg, n)) for n in pkg.__all__}
        claimed = _claimed(self.env).setdefault(package, {})
        lines: list[str] = []
        for mod in modules:
            module = importlib.import_module(mod)
            names = public.get(mod, [])
            for n in names:
                claimed[n] = self.env.docname
            # the module's own __all__ beyond what the package exports (documented under the module path)
            extra = [
                n
                for n in getattr(module, "__all__", [])
                if n not in names and not (_is_code(getattr(module, n, None)) and id(getattr(module, n)) in exported)
            ]
            if mod == package:
                extra = []
            # functions and classes the module only re-exports from another package (proofs_check.closed_forms
            # re-exports the library's closed forms): linked to where they are documented, not repeated
            foreign = [
                n
                for n in extra
                if _is_code(getattr(module, n, None)) and not getattr(module, n).__module__.startswith(package)
            ]
            extra = [n for n in extra if n not in foreign]
            title = f"``{mod}``"
            lines += [title, "-" * len(title), "", f".. automodule:: {mod}", ""]  # its docstring, in full
            if names:
                lines += _render([(f"{package}.{n}", getattr(pkg, n)) for n in names])
            if extra:
                lead = "Also in this module" if names else "In this module"
                lines += [f"{lead}, not re-exported at the top level (``from {mod} import ...``):", ""]
                lines += _render([(n, getattr(module, n)) for n in extra], relative=True)
            if foreign:
                refs = ", ".join(f":obj:`~{getattr(module, n).__module__}.{n}`" for n in foreign)
                lines += [f"Also in this module, re-exported from the library: {refs}.", ""]
            if mod == package and reexported:
                for n in reexported:
                    claimed[n] = self.env.docname
                targets = [_public_name(getattr(pkg, n), package) or f"{package}.{n}" for n in reexported]
                lines += ["Re-exported here: " + ", ".join(f":obj:`~{t}`" for t in targets) + ".", ""]
        return _parse(self, lines)

    def _reexported(self, package, other):
        """The names of ``package.__all__`` defined in the package ``other``: linked where ``other``
        documents them, else documented here under ``package``."""
        pkg, oth = importlib.import_module(package), importlib.import_module(other)
        names = [n for n in pkg.__all__ if _defining_module(package, n).split(".")[0] == other]
        if not names:
            return []
        claimed = _claimed(self.env).setdefault(package, {})
        for n in names:
            claimed[n] = self.env.docname
        linked = [n for n in names if getattr(oth, n, None) is getattr(pkg, n) and n in oth.__all__]
        lines = []
        if linked:
            refs = ", ".join(f":obj:`~{other}.{n}`" for n in linked)
            lines += [f"Also exported by ``{package}`` (``from {package} import ...``): {refs}.", ""]
        rest = [n for n in names if n not in linked]
        if rest:
            lines += _render([(f"{package}.{n}", getattr(pkg, n)) for n in rest])
        return _parse(self, lines)


class ModuleApi(SphinxDirective):
    required_arguments = 1
    option_spec = {"names": directives.unchanged}

    def run(self):
        modname = self.arguments[0]
        module = importlib.import_module(modname)
        exported = {}
        for package in PACKAGES:
            pkg = importlib.import_module(package)
            for n in pkg.__all__:
                exported.setdefault(id(getattr(pkg, n)), f"{package}.{n}")
        wanted = self.options.get("names")
        wanted = [n.strip() for n in wanted.split(",")] if wanted else list(module.__all__)
        own, elsewhere = [], []
        for n in wanted:
            obj = getattr(module, n)
            if _is_code(obj) and id(obj) in exported:
                elsewhere.append(exported[id(obj)])
            else:
                own.append((n, obj))
        if self.options.get("names"):  # a few names of the module: not its docstring
            lines = [f".. py:module:: {modname}", ""]
        else:
            lines = [f".. automodule:: {modname}", ""]
        if own:
            lines += _render(own, relative=True)
        if elsewhere:
            lines += ["Also exported here: " + ", ".join(f":obj:`~{q}`" for q in elsewhere) + ".", ""]
        return _parse(self, lines)


def _public_name(obj, but: str) -> str | None:
    """The documented public name of ``obj`` in another package than ``but``."""
    for package in PACKAGES:
        if package == but:
            continue
        pkg = importlib.import_module(package)
        for n in pkg.__all__:
            if getattr(pkg, n) is obj:
                return f"{package}.{n}"
    return None


def _is_code(obj) -> bool:
    return inspect.isclass(obj) or inspect.isroutine(obj)


def _parse(directive, lines):
    node = nodes.section()
    node.document = directive.state.document
    nested_parse_with_titles(directive.state, StringList(lines, source=directive.get_location()), node)
    return node.children


def _check_claimed(app, env):
    claimed = _claimed(env)
    for package in PACKAGES:
        if package not in claimed:
            continue
        pkg = importlib.import_module(package)
        missing = [n for n in pkg.__all__ if n not in claimed[package]]
        for n in missing:
            logger.warning(f"{package}.{n} is in {package}.__all__ but on no API page (add its group)")


def _merge(app, env, docnames, other):  # pragma: no cover - parallel builds only
    for package, names in getattr(other, "rd_api_claimed", {}).items():
        _claimed(env).setdefault(package, {}).update(names)


def _purge(app, env, docname):
    for names in _claimed(env).values():
        for n in [n for n, d in names.items() if d == docname]:
            del names[n]


# ------------------------------------------------------------------ cross-references
def _import_path(path: str):
    """The object at ``a.b.c.d`` (a module of this project plus an attribute chain), or None.

    Class attributes are looked up statically along the MRO (classmethods and staticmethods
    unwrapped), so the same function is found whichever subclass names it.
    """
    parts = path.split(".")
    if parts[0] not in PACKAGES:  # never import anything else by a guessed name
        return None
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            try:
                obj = inspect.getattr_static(obj, attr) if inspect.isclass(obj) else getattr(obj, attr)
            except AttributeError:
                return None
            if isinstance(obj, (classmethod, staticmethod)):
                obj = obj.__func__
        return obj
    return None


#: documented object types that the index maps back from the object to its documented name (data only when
#: it is a mutable container, an object of its own: a registry dict such as ``MODELS``, never a number or a
#: string, which may be shared)
_INDEXED = ("class", "exception", "function", "method", "classmethod", "staticmethod", "property", "data")
_SHAREABLE = (int, float, complex, str, bytes, bool, tuple, frozenset, type(None))


def _documented_index(env):
    """(id(object) -> documented name, bare name -> documented names), built once per build."""
    cache = getattr(env, "_rd_doc_index", None)
    if cache is not None:
        return cache
    index, by_last = {}, {}
    objects = env.get_domain("py").objects
    for fullname, entry in objects.items():
        by_last.setdefault(fullname.rsplit(".", 1)[-1], []).append(fullname)
        if entry.objtype not in _INDEXED:
            continue
        obj = _import_path(fullname)
        if obj is not None and not isinstance(obj, _SHAREABLE):
            index.setdefault(id(obj), fullname)
    env._rd_doc_index = (index, by_last)
    return env._rd_doc_index


def _via_object(path, index, objects):
    """The documented name of the object that ``path`` imports (via its longest importable prefix).

    ``Class.field`` of a dataclass field (documented in the class's Attributes section) resolves
    to the class.
    """
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        obj = _import_path(".".join(parts[:i]))
        if obj is None or inspect.ismodule(obj):
            continue
        if id(obj) not in index:
            return None
        name = ".".join([index[id(obj)], *parts[i:]])
        if name in objects:
            return name
        rest = parts[i:]
        if inspect.isclass(obj) and len(rest) == 1 and rest[0] in getattr(obj, "__dataclass_fields__", {}):
            return index[id(obj)]
        return None
    return None


def _home_module(node) -> str | None:
    """The module that defines the object whose docstring holds ``node`` (from the node's source)."""
    match = re.search(r"docstring of ([\w.]+)", node.source or "")
    if not match:
        return None
    obj = _import_path(match.group(1))
    while obj is not None and not inspect.ismodule(obj):
        mod = getattr(obj, "__module__", None)
        if isinstance(mod, str):
            return mod
        obj = None
    path = match.group(1).split(".")  # data or property: the longest importable module prefix
    for i in range(len(path) - 1, 0, -1):
        if inspect.ismodule(_import_path(".".join(path[:i]))):
            return ".".join(path[:i])
    return None


def _resolve(app, env, node, contnode):
    """Resolve a Python reference that the Python domain could not, or return None (then nitpicky warns)."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    objects = env.get_domain("py").objects
    index, by_last = _documented_index(env)
    candidates = []
    module, klass = node.get("py:module"), node.get("py:class")
    if module and klass:
        candidates.append(f"{module}.{klass}.{target}")
    if module:
        candidates.append(f"{module}.{target}")
    candidates.append(target)
    home = _home_module(node)
    if home:  # a docstring naming a neighbour in its own module
        candidates.append(f"{home}.{target}")
    for package in PACKAGES:  # a public name (or Name.attribute) used without its package
        candidates.append(f"{package}.{target}")
    found = next((c for c in candidates if c in objects), None) or next(
        (name for c in candidates if (name := _via_object(c, index, objects))), None
    )
    if found is None and "." not in target and len(set(by_last.get(target, []))) == 1:
        found = by_last[target][0]  # a bare name documented exactly once
    if found is None:
        return None
    entry = objects[found]
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, found)


# ------------------------------------------------------------------ theory anchors
THEORY_RE = re.compile(r"(?<![`<\w/])docs/theory\.md#([a-z0-9][a-z0-9-]*)")


def _theory_links(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        lines[i] = THEORY_RE.sub(r":theory:`\1`", line)


def theory_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``:theory:`drift-law``` -> a link to that section of the theory page (checked by MyST)."""
    env = inliner.document.settings.env
    label = f"docs/theory.md#{text}"
    node = addnodes.pending_xref(
        rawtext,
        refdomain="doc",
        reftype="myst",
        reftarget="theory",
        reftargetid=text,
        refdoc=env.docname,
        refexplicit=True,
    )
    node += nodes.inline(label, label)
    return [node], []


# ------------------------------------------------------------------ absolute values in plain text
#: inline markup whose content must not be touched: literals, roles, interpreted text
_PROTECTED_RE = re.compile(r"(``.+?``|:[\w:.+-]+:`[^`]*`|`[^`]*`_?_?)", re.S)
_INDENTED_BLOCK_RE = re.compile(r"^\s*\.\. [\w:-]+::|::\s*$")


def _escape_bars(app, what, name, obj, options, lines):
    """Escape ``|`` in running text, so ``|ω_h|`` is an absolute value, not a substitution.

    The package's docstrings are written for ``help()`` readers and use no reST substitutions;
    literals (also across lines), roles, directive bodies (``.. math::``), literal blocks and
    doctests are left alone.
    """
    protected = set()
    block_indent = None  # inside a directive body or literal block: the opening line's indentation
    in_doctest = False
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if in_doctest:
            if stripped:
                protected.add(i)
                continue
            in_doctest = False
        if block_indent is not None:
            if not stripped or indent > block_indent:
                protected.add(i)
                continue
            block_indent = None
        if stripped.startswith(">>>"):
            in_doctest = True
            protected.add(i)
            continue
        if _INDENTED_BLOCK_RE.search(line):
            block_indent = indent
            if stripped.startswith(".."):
                protected.add(i)
    start = 0
    while start < len(lines):  # runs of consecutive unprotected lines, treated as one text
        if start in protected:
            start += 1
            continue
        end = start
        while end < len(lines) and end not in protected:
            end += 1
        text = "\n".join(lines[start:end])
        if "|" in text:
            parts = _PROTECTED_RE.split(text)
            text = "".join(p if k % 2 else p.replace("|", "\\|") for k, p in enumerate(parts))
            lines[start:end] = text.split("\n")
        start = end


# ------------------------------------------------------------------ docstring completeness
#: numpydoc checks applied to the top-level public functions (``package.__all__``): every parameter
#: documented, a Returns section. (PR02, a documented parameter that does not exist, is checked for
#: every documented object by numpydoc itself, see conf.py.)
PUBLIC_FUNCTION_CHECKS = ("PR01", "RT01")


def _check_public_function(app, what, name, obj, options, lines):
    package, _, short = name.partition(".")
    if what != "function" or package not in PACKAGES or "." in short:
        return
    if short not in getattr(importlib.import_module(package), "__all__", ()):
        return
    checked = app.env.__dict__.setdefault("_rd_checked_functions", set())
    if name in checked:  # autosummary and autodoc both process each docstring
        return
    checked.add(name)
    from numpydoc.validate import validate

    report = validate(f"{obj.__module__}.{obj.__qualname__}")
    errors = [f"{code}: {msg}" for code, msg in report["errors"] if code in PUBLIC_FUNCTION_CHECKS]
    if errors:
        where = f"{inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]}"
        logger.warning(f"docstring of public function {name}: " + "; ".join(errors), location=where)


def setup(app):
    app.add_directive("public-api", PublicApi)
    app.add_directive("module-api", ModuleApi)
    app.add_role("theory", theory_role)
    app.connect("env-check-consistency", _check_claimed)
    app.connect("env-merge-info", _merge)
    app.connect("env-purge-doc", _purge)
    app.connect("missing-reference", _resolve)
    app.connect("autodoc-process-docstring", _theory_links)
    app.connect("autodoc-process-docstring", _escape_bars)
    app.connect("autodoc-process-docstring", _check_public_function)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
