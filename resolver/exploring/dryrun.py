"""`accord resolve --dry-run`: for every backend-like choice, what is legal, what is chosen, and why not.

A value is *legal* when pinning it, as if the user had typed it on top of the rest of the command,
still leaves a legal configuration (the solver may re-decide everything else). For an illegal value
we name the hard rules that exclude it: every rule that on its own rules the value out, or, when
only a combination does, a minimal set of rules found by deletion.

Backend-like flags are the choice flags whose name says they pick an implementation or a data
type; which name words mean that is data (`rules/dryrun.yaml`), not code. The values tried are the
solver's candidates, the catalog's choices and, for open string flags such as the diffusion
attention backend, the values the rules themselves name. An integer or list flag (asked for with
`--flag`) has no list of choices: it tries a candidate set declared per flag in the same file
(powers of two up to a count, divisors of counts, fixed values) on top of its default and the
values the rules name, computed from the facts at hand, and the solver judges each candidate.

Speed: one solve per value costs ~0.5 s on the LLM rules (~300 values); this takes ~40 ms. Most
answers need no search: the resolved configuration, with the pinned value swapped in, either still
satisfies every rule the pinned flag can influence (legal, by example) or breaks a rule that no
choice of the other flags can repair (illegal). Only the rest is solved, and only on the part of
the problem the pinned flag touches (`Launch.pinned`, which the CI matrix uses too).

This module computes the verdicts; `dryrun_text.py` prints them (a short view, or every flag in full).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import weakref
from typing import Any, Iterable, Mapping

from accord.resolver.api import ConflictError, plan_for, resolve
from accord.resolver.errors import UsageError
from accord.resolver.explaining.explain import DerivedReading, derived_readings, mentioned_values
from accord.resolver.explaining.ranking import kv_floor_holds, order_values, speed_rank
from accord.resolver.explaining.report import describe_value
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.yamlcache import read_yaml_files
from accord.resolver.solving.launch import Launch
from accord.resolver.solving.solve import Env, Plan


@dataclasses.dataclass(frozen=True)
class Choice:
    """One backend-like flag: its resolved value, where that came from, and every value's verdict."""

    flag: str
    chosen: Any
    source: str
    legal: tuple[Any, ...]
    excluded: tuple[tuple[Any, tuple[tuple[str, str], ...]], ...]   # (value, ((rule id, reason), ...))
    # per excluded value, the derived values its excluding rules read (`sm100 = false because ...`)
    derived: tuple[tuple[DerivedReading, ...], ...] = ()

    def to_dict(self) -> dict:
        """JSON: each exclusion lists its rules and, when they read derived values, `derived`."""
        excluded = []
        for i, (value, rules) in enumerate(self.excluded):
            item = {"value": value, "rules": [{"id": rid, "reason": why} for rid, why in rules]}
            if self.derived and self.derived[i]:
                item["derived"] = [reading.to_dict() for reading in self.derived[i]]
            excluded.append(item)
        return {"flag": self.flag, "chosen": self.chosen, "source": self.source, "legal": list(self.legal),
                "excluded": excluded}


# -- which flags, which values ------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _backend_words() -> tuple[frozenset, frozenset, frozenset]:
    """(any_word, last_word, skip_types) from `rules/dryrun.yaml`."""
    (data,), = read_yaml_files([RULES_DIR / "dryrun.yaml"])
    spec = data["backend_like"]
    return frozenset(spec["any_word"]), frozenset(spec["last_word"]), frozenset(spec["skip_types"])


# Per compiled plan, what depends on its rules alone: the backend-like flags, and each choice
# flag's values. Every dry run (each change on the configurator's page) asks for both again.
_STATIC: weakref.WeakKeyDictionary[Plan, dict] = weakref.WeakKeyDictionary()


def _static(plan: Plan) -> dict:
    memo = _STATIC.get(plan)
    if memo is None:
        memo = _STATIC[plan] = {"values": {}}
    return memo


def backend_like(plan: Plan) -> list[str]:
    """Choice flags that select an implementation or a data type and have values to try."""
    memo = _static(plan)
    if "backend_like" not in memo:
        any_word, last_word, skip_types = _backend_words()
        names = []
        for flag in plan.catalog:
            words = flag.name.split("_")
            named = any_word.intersection(words) or (len(words) > 1 and words[-1] in last_word)
            if flag.type in skip_types or not named:
                continue
            if values_of(plan, flag.name):
                names.append(flag.name)
        memo["backend_like"] = tuple(names)
    return list(memo["backend_like"])


def values_of(plan: Plan, name: str, facts: Iterable[Mapping[str, Any]] = ()) -> list[Any]:
    """The values to try: the solver's candidates first, then the catalog's, then the rules' own.

    An integer or list flag tries its declared candidates (see `candidate_values`) over every fact
    set in `facts` (a matrix spans several machines and models), in ascending order.
    """
    flag = plan.catalog[name]
    if flag.finite_domain is None and flag.type in CANDIDATE_TYPES:
        return candidate_values(plan, name, facts)
    known = _static(plan)["values"]
    if name not in known:
        known[name] = tuple(_choice_values(plan, name))
    return list(known[name])


def _choice_values(plan: Plan, name: str) -> list[Any]:
    """A choice flag's values, without the old spellings of others (`value_aliases`: a typed old
    spelling is the value it names, so it is judged, listed and put in matrix rows as that)."""
    flag = plan.catalog[name]
    spellings = {alias for alias, _ in flag.value_aliases}
    ordered = list(plan.domain(name)) if name in plan.prefer_rules else []
    extra = flag.finite_domain if flag.finite_domain is not None else sorted(mentioned_values(plan, name), key=str)
    for value in extra:
        if value not in ordered:
            ordered.append(value)
    return [v for v in ordered if v is not None and v not in spellings]


CANDIDATE_TYPES = ("int", "list")


@functools.lru_cache(maxsize=None)
def _candidate_specs() -> dict[str, dict[str, Any]]:
    """`candidates:` of `rules/dryrun.yaml`: per flag, which counts and values to try."""
    (data,), = read_yaml_files([RULES_DIR / "dryrun.yaml"])
    return data.get("candidates") or {}


def candidate_values(plan: Plan, name: str, facts: Iterable[Mapping[str, Any]] = ()) -> list[Any]:
    """An integer or list flag's candidate set: its default, the values the rules name, and what
    its `rules/dryrun.yaml` entry derives from each fact set (unknown facts add nothing).

    Only candidates: which of them are legal is the solver's verdict, never this function's.
    """
    flag = plan.catalog[name]
    spec = _candidate_specs().get(name, {})
    found: list[Any] = [flag.default, *sorted(mentioned_values(plan, name), key=str), *spec.get("values", ())]
    for fact_set in facts:
        for key in spec.get("powers_of_two_up_to", ()):
            bound = _count(fact_set.get(key))
            found.extend(1 << i for i in range(bound.bit_length()) if bound)
        for key in spec.get("divisors_of", ()):
            count = _count(fact_set.get(key))
            found.extend(d for d in range(1, count + 1) if count % d == 0)
    wanted = (list, tuple) if flag.type == "list" else (int,)
    typed = [list(v) if flag.type == "list" else v for v in found
             if isinstance(v, wanted) and not isinstance(v, bool)]
    unique = {describe_value(v): v for v in typed}
    return sorted(unique.values(), key=lambda v: (len(v), list(v)) if flag.type == "list" else v)


def _count(value: Any) -> int:
    """A positive integer fact, else 0 (unknown, absent or not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# -- the dry run ----------------------------------------------------------------------------------

def selected_flags(plan: Plan, only: list[str] | None, facts: Mapping[str, Any] | None = None) -> list[str]:
    """The flags to report: every backend-like one, or the ones `--flag` names (any with values)."""
    names = backend_like(plan)
    if not only:
        return names
    wanted = []
    for raw in only:
        name = raw.lstrip("-").replace("-", "_")
        if name not in plan.catalog:
            hint = difflib.get_close_matches(name, list(plan.catalog.flags), n=1)
            raise UsageError(f"--flag {raw}: no such {plan.catalog.system} flag"
                             + (f"; did you mean {hint[0]}?" if hint else ".")
                             + " Without --flag the dry run lists every backend-like flag.")
        if not values_of(plan, name, [facts or {}]):
            raise UsageError(f"--flag {raw}: {name} takes open-ended values, so there is no list of "
                             f"legal ones to show; pick a choice flag such as {names[0]}.")
        if name not in wanted:
            wanted.append(name)
    return wanted


def dry_run(system: str, user: Mapping[str, Any], facts: Mapping[str, Any],
            only: list[str] | None = None) -> tuple[ResolvedConfig, list[Choice]]:
    """The resolved config (raises ConflictError if the command itself is illegal) and each choice.

    Defaults are free: when the command is illegal only because a flag the user did not type keeps
    its default (tp 1 for a model whose weights need more GPUs), and that flag is asked about, its
    legal values are listed and the preferred one (resolver/explaining/ranking.py) is shown as
    chosen, with the rest of the command resolved around it."""
    plan = plan_for(system)
    names = selected_flags(plan, only, facts)
    try:
        config = resolve(system, user, facts)
    except ConflictError as err:
        freed = _free_default(plan, names, user, facts)
        if freed is None:
            raise err from None
        name, value, config = freed
        choices = judge(plan, names, {**user, name: value}, facts, config)
        rule = ", ".join(err.conflicts[0].rules) if err.conflicts else "a rule"
        source = f"preferred; the default {describe_value(plan.catalog[name].default)} breaks {rule}"
        return config, [dataclasses.replace(c, source=source) if c.flag == name else c for c in choices]
    return config, judge(plan, names, user, facts, config)


def _free_default(plan: Plan, names: list[str], user: Mapping[str, Any],
                  facts: Mapping[str, Any]) -> tuple[str, Any, ResolvedConfig] | None:
    """(flag, its preferred legal value, the config with it pinned) for the first asked-about flag
    the user did not type that makes an illegal command legal, else None. Preferred: the KV-cache
    floor holds, then upstream's fastest-first order, then the candidates' own order."""
    for name in names:
        if name in user:
            continue
        legal = []
        for order, value in enumerate(values_of(plan, name, [facts])):
            pinned = {**user, name: value}
            decided = plan.decisions(pinned, facts)
            if decided is None:
                continue
            env = Env(plan, pinned, facts, decided)
            legal.append(((not kv_floor_holds(plan, pinned, facts, decided),
                           speed_rank(plan, name, value, env), order), value))
        if legal:
            value = min(legal, key=lambda item: item[0])[1]
            return name, value, resolve(plan.catalog.system, {**user, name: value}, facts)
    return None


def judge(plan: Plan, names: list[str], user: Mapping[str, Any], facts: Mapping[str, Any],
          config: ResolvedConfig) -> list[Choice]:
    """Each named flag's verdicts against a configuration `user` and `facts` already resolved to
    (the configurator resolves a launch once and answers both the command and its choices from it)."""
    launch = Launch(plan, user, facts, resolved=config.values)
    env = Env(plan, dict(user), facts, {})
    choices = []
    for name in names:
        legal, excluded, derived = [], [], []
        for value in values_of(plan, name, [facts]):
            groups = None if value == config.values[name] else launch.pinned({name: value}).exclusions
            if groups is None:
                legal.append(value)
            else:
                rules = tuple(dict.fromkeys(rule for group in groups for rule in group))  # each once
                excluded.append((value, tuple((r.id, r.reason) for r in rules)))
                derived.append(_deciding_values(plan, config, {**user, name: value}, facts, rules))
        prov = config.provenance[name]
        legal = order_values(plan, name, legal, env)  # upstream's fastest first (the preference data)
        choices.append(Choice(name, config.values[name], prov.get("rule") or prov["source"],
                              tuple(legal), tuple(excluded), tuple(derived)))
    return choices


def _deciding_values(plan: Plan, config: ResolvedConfig, pinned: Mapping[str, Any], facts: Mapping[str, Any],
                     rules) -> tuple[DerivedReading, ...]:
    """The derived values the excluding rules read, with the pinned value in place and the other
    decisions as resolved: what decided the exclusion, in the words `accord why` uses."""
    decided = {d: config.values[d] for d in plan.prefer_rules if d not in pinned}
    env = Env(plan, pinned, facts, decided)
    return tuple(derived_readings(plan, [e for r in rules for e in (r.when, r.require)], env))
