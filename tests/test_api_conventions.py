"""The calling conventions of docs/conventions.md, checked on every public signature.

One test per public callable: every function, every class's ``__init__`` and
every public method (class- and static methods included) named in the
``__all__`` of ``reduced_dynamics``, ``proofs_check`` and each of their public
submodules. Result dataclasses (subclasses of
``reduced_dynamics._results.FrozenResult``) are skipped: their fields are data,
not parameters. Each exception to a rule is listed below with its reason, and
each listed exception is itself checked (an entry that no longer matches a
public callable, or that no longer needs the exception, fails).
"""

import importlib
import inspect
import pkgutil

import pytest

import proofs_check
import reduced_dynamics
from reduced_dynamics._results import FrozenResult

PACKAGES = (reduced_dynamics, proofs_check)


def _public_modules():
    for pkg in PACKAGES:
        yield pkg
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                yield importlib.import_module(info.name)


def _public_callables():
    """``{qualified name: function}``; an object exported twice is listed once, under its first name."""
    out, seen = {}, set()
    for mod in _public_modules():
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            qual = f"{mod.__name__}.{name}"
            if inspect.isclass(obj):
                if issubclass(obj, FrozenResult):
                    continue
                for mname, member in vars(obj).items():
                    if mname.startswith("_") and mname != "__init__":
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isfunction(member):
                        out[f"{qual}.{mname}"] = member
            elif inspect.isfunction(obj):
                out[qual] = obj
    return out


CALLABLES = _public_callables()
IDS = sorted(CALLABLES)

# ------------------------------------------------------------------ exceptions
# (a) loose data-model parameters d, L, sigma2, Sigma.
LOOSE_NAMES = {"d", "L", "sigma2", "Sigma"}
# The architecture dimension of a model is the model's own size, not the data model
# (the model is then evaluated on any setting with setting.d == model.d).
MODEL_DIMENSION = {
    "reduced_dynamics.AttentionModel.__init__": {"d"},
    "reduced_dynamics.ReducedModel.__init__": {"d"},
    "reduced_dynamics.make_model": {"d"},
    # the torch module of the authors' layout (issue 20): its size, as for AttentionModel
    "reduced_dynamics.importers.AuthorsAttention.__init__": {"d"},
}
# The proportional limit of Theorem 1(c) has no finite d or L: these take exactly the
# keyword-only (sigma2, xi) (plus the mpmath precision dps); docs/conventions.md.
PROPORTIONAL_LIMIT = {
    "reduced_dynamics.risk_ratio_excess",
    "reduced_dynamics.bound_slack",
    # the closed forms are defined in the library; proofs_check (and proofs_check.closed_forms)
    # re-export the same objects, so each is listed once, under its library name
    "reduced_dynamics.estimation.closed_forms.gd_risk_limit",
    "reduced_dynamics.estimation.closed_forms.bayes_risk_limit",
    "reduced_dynamics.estimation.closed_forms.risk_ratio_bound",
    "reduced_dynamics.estimation.closed_forms.risk_ratio_limit",
    "reduced_dynamics.estimation.closed_forms.bound_relative_slack",
    "reduced_dynamics.estimation.closed_forms.gd_risk_limit_mp",
    "reduced_dynamics.estimation.closed_forms.bayes_risk_limit_mp",
    "reduced_dynamics.estimation.closed_forms.risk_ratio_limit_mp",
    "reduced_dynamics.estimation.closed_forms.risk_ratio_bound_mp",
    "proofs_check.bayes.bound_relative_slack_mp",
    "proofs_check.bayes.bound_rho_mp",
}
# Setting is the data model itself: its fields are d, L, sigma2, Sigma and
# Setting.replace(**changes) takes field names, as dataclasses.replace does.
SETTING_CLASS = "reduced_dynamics.Setting."

# (b) seed=None is allowed only where the function is deterministic for some inputs and
# raises a ValueError naming `seed` when randomness is needed without one.
# {name: (call that needs no randomness, call that needs randomness)}, both without a seed.
SEED_OPTIONAL = {
    "reduced_dynamics.initial_state": (
        lambda f: f(3, kind="symmetric", scale=0.1),
        lambda f: f(3, kind="random", scale=0.1),
    ),
}

# (c) as_setting validates the setting it is given: the setting is its subject, and
# `where` only labels the caller in the error message.
SETTING_IS_SUBJECT = {"reduced_dynamics.setting.as_setting"}

# (d) **kwargs.
VAR_KEYWORD_OK = {
    # numpy.savez's interface: each keyword is the name of an array stored in the file.
    "reduced_dynamics.io.atomic_savez",
    # not constructible: __init__ only raises a TypeError pointing to the factories.
    "reduced_dynamics.Prompts.__init__",
    # Setting.replace(**changes): field names, as dataclasses.replace.
    "reduced_dynamics.Setting.replace",
    # model.pack(omega=..., mu=..., W=...): each keyword is the name of one of the model's state parts, which
    # differ by model (an unknown or a missing part is a ValueError naming it).
    "reduced_dynamics.models.ReducedModel.pack",
    # reduced_model(setting, n_heads=, objective=, **layout): the options of the model the setting selects
    # (exponent_cap, per_head, tol, fd_step), named keyword-only parameters of that model's class; an option the
    # selected model does not take is a ValueError.
    "reduced_dynamics.reduced_model",
}

# (e) a number of prompts (samples drawn) is `n_prompts`. These names are refused:
PROMPT_COUNT_ALIASES = {"n", "N", "n_samples", "num_samples", "num_prompts", "n_mc", "n_eval"}
# ... except where the count is not one of prompts: `n_eval` counts the time points of a trajectory
# (the integrator itself calls them `n_times`) ...
TIME_POINT_COUNT = {
    "reduced_dynamics.dynamics.portrait.two_head_portrait_data": "n_eval",
    "reduced_dynamics.dynamics.portrait.general_portrait_data": "n_eval",
}
# ... and a model's `initial_state(seed=, n=)` counts random starts (the rows of a batch of states).
START_COUNT = {
    "reduced_dynamics.models.ReducedModel.initial_state": "n",
    "reduced_dynamics.models.precond.PrecondModel.initial_state": "n",
}
NOT_A_PROMPT_COUNT = TIME_POINT_COUNT | START_COUNT


def _params(qual):
    return list(inspect.signature(CALLABLES[qual]).parameters.values())


def test_enumeration_is_not_empty():
    # a broken enumeration would make every parametrized test vacuous
    assert len(CALLABLES) > 150
    for name in ("reduced_dynamics.sample_prompts", "reduced_dynamics.AttentionModel.init", "proofs_check.run_checks"):
        assert name in CALLABLES


@pytest.mark.parametrize(
    "qual",
    sorted(
        set(MODEL_DIMENSION)
        | PROPORTIONAL_LIMIT
        | set(SEED_OPTIONAL)
        | SETTING_IS_SUBJECT
        | VAR_KEYWORD_OK
        | set(NOT_A_PROMPT_COUNT)
    ),
)
def test_every_listed_exception_is_a_public_callable(qual):
    assert qual in CALLABLES, f"{qual} is listed as an exception but is not a public callable"


@pytest.mark.parametrize("qual", IDS)
def test_no_loose_data_model_parameters(qual):
    if qual.startswith(SETTING_CLASS):
        return
    params = _params(qual)
    loose = {p.name for p in params} & LOOSE_NAMES
    if qual in PROPORTIONAL_LIMIT:
        kinds = {p.name: p.kind for p in params}
        assert set(kinds) - {"dps"} == {"sigma2", "xi"}, f"{qual}: a proportional-limit function takes (*, sigma2, xi)"
        assert all(k is inspect.Parameter.KEYWORD_ONLY for k in kinds.values()), f"{qual}: sigma2, xi keyword-only"
        return
    allowed = MODEL_DIMENSION.get(qual, set())
    assert loose <= allowed, f"{qual} takes loose {sorted(loose - allowed)}: pass a Setting as `setting`"
    assert not allowed or loose == allowed, f"{qual} no longer needs its exception {sorted(allowed)}"


@pytest.mark.parametrize("qual", IDS)
def test_seed_is_keyword_only_and_required(qual):
    seed = next((p for p in _params(qual) if p.name == "seed"), None)
    if seed is None:
        assert qual not in SEED_OPTIONAL
        return
    assert seed.kind is inspect.Parameter.KEYWORD_ONLY, f"{qual}: `seed` must be keyword-only"
    if qual in SEED_OPTIONAL:
        assert seed.default is None, f"{qual}: listed as seed-optional, default must be None"
        deterministic, random = SEED_OPTIONAL[qual]
        deterministic(CALLABLES[qual])  # works without a seed
        with pytest.raises(ValueError, match="`seed`"):
            random(CALLABLES[qual])
    else:
        assert seed.default is inspect.Parameter.empty, f"{qual}: `seed` must have no default"


@pytest.mark.parametrize("qual", IDS)
def test_setting_then_keyword_only(qual):
    params = _params(qual)
    names = [p.name for p in params]
    if "setting" not in names:
        return
    i = names.index("setting")
    setting = params[i]
    if setting.default is inspect.Parameter.empty:
        assert setting.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, (
            f"{qual}: a required `setting` is positional-or-keyword"
        )
        # **kwargs can only be passed by keyword (whether it is allowed at all is test_no_var_keyword's rule)
        keyword = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD)
        after = [p.name for p in params[i + 1 :] if p.kind not in keyword]
        if qual in SETTING_IS_SUBJECT:
            assert after, f"{qual} no longer needs its exception"
            return
        assert not after, f"{qual}: parameters after `setting` must be keyword-only, got {after}"
    else:
        assert setting.kind is inspect.Parameter.KEYWORD_ONLY, f"{qual}: an optional `setting` is keyword-only"


@pytest.mark.parametrize("qual", IDS)
def test_no_var_keyword(qual):
    has = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in _params(qual))
    if qual in VAR_KEYWORD_OK:
        assert has, f"{qual} no longer needs its exception"
    else:
        assert not has, f"{qual} takes **kwargs: name its parameters"


def test_prompts_is_not_constructible():
    # the reason Prompts.__init__ may take *args, **kwargs
    with pytest.raises(TypeError, match="from_arrays"):
        reduced_dynamics.Prompts()
    with pytest.raises(TypeError, match="from_arrays"):
        reduced_dynamics.Prompts(X=1)


@pytest.mark.parametrize("qual", IDS)
def test_prompt_count_is_n_prompts(qual):
    names = {p.name for p in _params(qual)}
    allowed = {NOT_A_PROMPT_COUNT[qual]} if qual in NOT_A_PROMPT_COUNT else set()
    bad = (names & PROMPT_COUNT_ALIASES) - allowed
    assert not bad, f"{qual} names a count {sorted(bad)}: a number of prompts is `n_prompts`"
    assert allowed <= names, f"{qual} no longer needs its exception {sorted(allowed)}"


def test_time_point_count_counts_time_points():
    # the reason the portrait data may call a count n_eval: it is the number of recorded times of each trajectory
    from reduced_dynamics import Setting, integrate, reduced_model
    from reduced_dynamics.dynamics.portrait import general_portrait_data

    s = Setting(d=3, L=10, sigma2=0.1)
    data = general_portrait_data(s, seed=0, n_heads=2, n_traj=1, t_end=10.0, n_eval=7)
    assert data["t"].shape == (1, 7) and data["omega"].shape == (1, 7, 2)
    # and the integrator's own count of output times is n_times
    m = reduced_model(s, n_heads=2)
    assert integrate(m, m.state([0.1, -0.1], [0.1, -0.1]), t_end=10.0, n_times=7).t.shape == (7,)


def test_start_count_counts_starts():
    # the reason a model's initial_state may call a count n: it is the number of starts, rows of a batch
    from reduced_dynamics import Setting, reduced_model

    for s in (
        Setting(d=3, L=10, sigma2=0.1),
        Setting(d=3, L=10, sigma2=0.1, Sigma=[[2.0, 0, 0], [0, 1, 0], [0, 0, 1]]),
    ):
        m = reduced_model(s, n_heads=2)
        assert m.initial_state(seed=0, n=4).shape == (4, m.size)


def test_fuzz_budget_stops_a_computation_that_never_ends_and_a_call_that_blocks():
    """The fuzz suites' time budget (tests/api_fuzz.py): CPU time for a loop, wall time for a blocked call."""
    import time

    import api_fuzz

    def spin(x):
        while True:
            x = x + 1

    def block(x):
        time.sleep(30)

    for fn, kw in ((spin, dict(timeout=0.3, wall_timeout=20.0)), (block, dict(timeout=5.0, wall_timeout=0.3))):
        entry = api_fuzz.E(fn.__name__, fn, 1, x=0)
        t0 = time.monotonic()
        assert api_fuzz.verdict(entry, "x", 1, **kw) == "timeout"
        assert time.monotonic() - t0 < 10
