"""The one preference ranking: which legal answer is picked when several are legal.

Legality is the rules' business; this module only orders what is legal, and every place that
picks one answer asks it: conflict fixes and their order (resolver/explaining/fixes.py), the
combined fix and `--relax` (resolver/explaining/diagnose.py, resolver/api.py), the configurator's
one-click fixes (which are the conflict fixes), the order and chosen value of `resolve --dry-run`
(resolver/exploring/dryrun.py) and matrix rows (resolver/exploring/matrix.py).

What is preferred is data, per system, in `rules/preferences/<system>.yaml` (see rules/README.md):
- `identity`: flags naming the served model, never dropped or changed by a fix;
- `checkpoint`: flags restating a fact of the checkpoint (its quantization), never added by a fix;
- `fastest_first`: per flag, upstream's auto-selection order for the platform and GPU generation;
- `kv_floor`: an expression that holds when the KV-cache pool left on each rank is large enough;
- `nearer`: which integer sizes a fix tries for a typed size, nearest first.
The ranking of fixes itself (`fix_key`) is the order those preferences are applied in; it is
documented there, once.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import Any, Callable, Iterable, Mapping, Sequence

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.expr import Expr, constant, parse
from accord.resolver.language.expr_compiler import ExpressionError
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.yamlcache import read_yaml_files
from accord.resolver.solving.solve import Env, Plan

PREFERENCES_DIR = RULES_DIR / "preferences"


@dataclasses.dataclass(frozen=True)
class SpeedOrder:
    """One flag's fastest-first order: (condition, values) cases, and the values always last.

    Worked out afresh each time it is asked, not kept by the cache layer: its cases read a few
    facts, and evaluating them costs less than writing a lookup key from those facts' values."""

    cases: tuple[tuple[Expr | None, tuple[Any, ...]], ...]
    slowest: tuple[Any, ...]

    def order(self, env: Env) -> tuple[Any, ...]:
        """The values in this order for `env`: those of the first case that holds."""
        for when, values in self.cases:
            try:
                if when is None or when(env):
                    return values
            except UnknownFact:
                continue
        return ()


@dataclasses.dataclass(frozen=True)
class Preferences:
    identity: frozenset[str] = frozenset()
    checkpoint: frozenset[str] = frozenset()
    speed: Mapping[str, SpeedOrder] = dataclasses.field(default_factory=dict)
    kv_floor: Expr | None = None
    powers_of_two_beyond: int = 2
    powers_of_two_up_to: tuple[str, ...] = ()
    kv_floor_needs: tuple[str, ...] = ()   # facts without which the KV floor cannot be told
    kv_floor_sized_by: frozenset[str] = frozenset()   # flags whose change can move the pool
    power_of_two_sizes: frozenset[str] = frozenset()  # int flags usually powers of two (those tried)


_LOADED: "weakref.WeakKeyDictionary[Plan, Preferences]" = weakref.WeakKeyDictionary()


def preferences_for(plan: Plan) -> Preferences:
    """The preferences of a plan's system (empty when the system has no preferences file).

    Entries naming flags, derived values or facts the plan does not have are left out, so a small
    test catalog of the same system gets the preferences that apply to it; `check_preferences`
    (run by the tests on the real rules) refuses them instead."""
    found = _LOADED.get(plan)
    if found is None:
        found = _LOADED[plan] = _load(plan, strict=False)
    return found


def check_preferences(plan: Plan) -> Preferences:
    """The preferences of a plan's system, raising UsageError on any entry that does not apply."""
    return _load(plan, strict=True)


class _Skip(Exception):
    """An entry that does not apply to this plan (lenient loading leaves it out)."""


def _load(plan: Plan, strict: bool) -> Preferences:
    """The preferences file read against `plan`; `strict` refuses what `_Reader` would skip."""
    path = PREFERENCES_DIR / f"{plan.catalog.system}.yaml"
    if not path.exists():
        return Preferences()
    (data,), = read_yaml_files([path])
    reader = _Reader(plan, strict, data or {}, f"rules/preferences/{path.name}")
    speed = _speed_orders(reader)
    floor = reader.data.get("kv_floor")
    kv_floor = _kv_floor(reader, floor)
    nearer = reader.data.get("nearer") or {}
    for section, listed in (("nearer.power_of_two_sizes", nearer.get("power_of_two_sizes")),
                            ("kv_floor.sized_by", (floor or {}).get("sized_by"))):
        reader.known_flags(section, listed)
    return Preferences(reader.flags("identity"), reader.flags("checkpoint"), speed, kv_floor,
                       int(nearer.get("powers_of_two_beyond", 2)), tuple(nearer.get("powers_of_two_up_to") or ()),
                       tuple((floor or {}).get("needs") or ()),
                       frozenset((floor or {}).get("sized_by") or ()) & frozenset(plan.catalog.flags),
                       frozenset(nearer.get("power_of_two_sizes") or ()) & frozenset(plan.catalog.flags))


class _Reader:
    """Reads a preferences file's entries against one plan: what an expression may name, and how a
    problem is met (an error when `strict`, otherwise `_Skip` so the entry is left out)."""

    def __init__(self, plan: Plan, strict: bool, data: Mapping[str, Any], where: str):
        self.plan = plan
        self.strict = strict
        self.data = data
        self.where = where
        # Grown by the KV floor's terms, which later expressions read by name.
        self.names: dict[str, Expr] = {d.id: d.expr for d in plan.ruleset.derived}
        self.names.update({s.id: constant(s.id, s.values) for s in plan.ruleset.sets})
        self.meta = plan.catalog.choice_metadata()

    def problem(self, message: str) -> Exception:
        """The exception for an entry that does not apply (raised by the caller)."""
        return UsageError(f"{self.where}: {message}") if self.strict else _Skip()

    def expr(self, text: Any, what: str) -> Expr:
        """An expression of the file, parsed; one reading an unknown flag is a problem."""
        try:
            parsed = parse(text, self.names, self.meta)
        except ExpressionError as err:
            raise self.problem(f"{what}: {err}") from None
        unknown = sorted(parsed.flags - set(self.plan.catalog.flags))
        if unknown:
            raise self.problem(f"{what} reads unknown flags {unknown}.")
        return parsed

    def known_flags(self, section: str, listed: Iterable[str] | None) -> None:
        """When strict, refuse a flag list naming flags the catalog lacks (lenient: they are dropped)."""
        unknown = sorted(set(listed or ()) - set(self.plan.catalog.flags))
        if unknown and self.strict:
            raise UsageError(f"{self.where}: {section} names unknown flags {unknown}; use catalog flag names.")

    def flags(self, section: str) -> frozenset[str]:
        """A section's `flags` list, as the catalog flags it names."""
        listed = (self.data.get(section) or {}).get("flags") or []
        self.known_flags(section, listed)
        return frozenset(listed) & frozenset(self.plan.catalog.flags)


def _speed_orders(reader: _Reader) -> dict[str, SpeedOrder]:
    """`fastest_first`: each flag's order (an entry may be `same_as` another flag's cases)."""
    speed: dict[str, SpeedOrder] = {}
    raw_speed = reader.data.get("fastest_first") or {}
    for name, entry in raw_speed.items():
        try:
            if name not in reader.plan.catalog.flags:
                raise reader.problem(f"fastest_first names unknown flag {name!r}.")
            source = raw_speed.get(entry["same_as"]) if "same_as" in entry else entry
            if not source or "cases" not in source:
                raise UsageError(f"{reader.where}: fastest_first.{name} needs 'cases' (or 'same_as' a flag that "
                                 f"has them).")
            cases = tuple((reader.expr(case["when"], f"fastest_first.{name}") if "when" in case else None,
                           tuple(case["order"])) for case in source["cases"])
            speed[name] = SpeedOrder(cases, tuple(source.get("slowest") or ()))
        except _Skip:
            continue
    return speed


def _kv_floor(reader: _Reader, floor: Mapping[str, Any] | None) -> Expr | None:
    """`kv_floor.holds`, after its named terms (None when absent or, lenient, when it does not apply)."""
    if not floor:
        return None
    try:
        for term in floor.get("terms") or []:
            reader.names[term["id"]] = _named(term["id"], reader.expr(term["value"], f"kv_floor term {term['id']}"))
        return reader.expr(floor["holds"], "kv_floor.holds")
    except _Skip:
        return None


def _named(name: str, body: Expr) -> Expr:
    """A term read by name from later expressions: it inherits what its body reads."""
    return Expr(name, body.flags, body.facts, body._fn, body.set_checks, body.names)


# -- values -------------------------------------------------------------------------------------

def speed_rank(plan: Plan, name: str, value: Any, env: Env) -> int:
    """A value's place in its flag's fastest-first order here (0 fastest); values the data does
    not list come after the listed ones, the `slowest` ones after everything. 0 for a flag
    without an order (no value is faster than another)."""
    order = preferences_for(plan).speed.get(name)
    if order is None:
        return 0
    listed = order.order(env)
    if value in listed:
        return listed.index(value)
    if value in order.slowest:
        return len(listed) + 1 + order.slowest.index(value)
    return len(listed)


def order_values(plan: Plan, name: str, values: Iterable[Any], env: Env) -> list[Any]:
    """Values of one flag, most preferred first: fastest first by the data (stable otherwise)."""
    values = list(values)
    if name not in preferences_for(plan).speed:
        return values
    return sorted(values, key=lambda v: speed_rank(plan, name, v, env))


def nearer_sizes(plan: Plan, current: int, facts: Mapping[str, Any] = {}, name: str | None = None) -> list[int]:
    """Integers to try instead of a typed `current`, nearest (by ratio) first, larger first on a
    tie: its half, its double and its quarter; for a size usually a power of two (`nearer.power_of_two_sizes`, or
    when no flag is named) also the powers of two up to `powers_of_two_beyond` x current or up to
    the `powers_of_two_up_to` facts (a port or a GPU index is no power of two). Below 1 (a typed
    0) they are the sizes from 1 up."""
    prefs = preferences_for(plan)
    found = {v for v in (current // 2, current * 2, current // 4) if v >= 1}
    if name is None or name in prefs.power_of_two_sizes:
        bounds = [facts.get(key) for key in prefs.powers_of_two_up_to]
        top = max(2, current * prefs.powers_of_two_beyond,
                  *(b for b in bounds if isinstance(b, int) and not isinstance(b, bool)))
        found |= {1 << i for i in range(top.bit_length()) if (1 << i) <= top}
    found.discard(current)
    if current < 1:  # a typed 0 or a negative size: no ratio to be near, so the smallest first
        return sorted(found)
    return sorted(found, key=lambda v: (abs(math.log(v / current)), -v))


DROP_DISTANCE = 10.0  # a dropped value that is not a size: farther than any other value


def distance(value: Any, current: Any, dropped: bool = False) -> float:
    """How far a value is from the typed one it replaces: the log ratio of sizes; else 0 for a
    value the fix names and DROP_DISTANCE for what dropping the flag leaves (so another value of
    the flag, as fast, comes before dropping it)."""
    if isinstance(value, int) and isinstance(current, int) and not isinstance(value, bool) \
            and not isinstance(current, bool) and value > 0 and current > 0:
        return abs(math.log(value / current))
    return DROP_DISTANCE if dropped else 0.0


# -- fixes --------------------------------------------------------------------------------------

def fix_allowed(plan: Plan, changes: Sequence[tuple[str, Any]], drops: Sequence[str],
                user: Mapping[str, Any]) -> bool:
    """Whether a fix may be offered at all: it keeps the served model (no identity flag the user
    typed is dropped or changed) and adds no checkpoint fact the user did not type."""
    prefs = preferences_for(plan)
    for name in drops:
        if name in prefs.identity:
            return False
    for name, _ in changes:
        if name in prefs.identity and name in user:
            return False
        if name in prefs.checkpoint and name not in user:
            return False
    return True


def kv_floor_moves(plan: Plan, changed: Iterable[str]) -> bool:
    """Whether changing these flags can move the KV pool (`kv_floor.sized_by`): a fix that
    changes none of them leaves the pool as the command had it, and is not judged by the floor."""
    return not preferences_for(plan).kv_floor_sized_by.isdisjoint(changed)


def kv_floor_holds(plan: Plan, values: Mapping[str, Any], facts: Mapping[str, Any],
                   decided: Mapping[str, Any] | None) -> bool:
    """Whether the KV pool left on each rank meets the floor (True when it cannot be told)."""
    prefs = preferences_for(plan)
    floor = prefs.kv_floor
    if floor is None or not all(key in facts and facts[key] is not None for key in prefs.kv_floor_needs):
        return True  # no model facts to size the pool with (asked of every fix: answered at once)
    try:
        return bool(floor(Env(plan, values, facts, decided or {})))
    except (UnknownFact, TypeError, ZeroDivisionError):
        return True


@dataclasses.dataclass(frozen=True)
class FixFacts:
    """What the ranking needs to know of one verified fix."""

    size: int                 # changed + dropped flags
    hinted: int               # 0 the rule's own `fix:` hint, 1 other values of the flags it sets, 2 neither
    kv_ok: bool               # the KV-cache floor holds after it
    added_warnings: int       # warnings the fix adds to the command's own
    checkpoint_set: int       # checkpoint flags it sets to a value (rather than leaving to the checkpoint)
    typed_touched: int        # typed values it changes or drops
    slowness: int             # summed fastest-first places of the backends it sets
    distance: float           # how far its new sizes are from the typed ones
    order: int                # place among the candidates as proposed


def fix_key(f: FixFacts) -> tuple:
    """The ranking of verified fixes, best first:
    1. the KV-cache floor holds (a fix that leaves no KV pool does not serve);
    2. fewest changed flags;
    3. the rule's own `fix:` hint, then other values of the flags it sets;
    4. adds no warning the command did not have;
    5. leaves the checkpoint's own facts to the checkpoint (dropping a typed --quantization
       beats changing it to another method the checkpoint does not carry);
    6. fastest backends by upstream's auto-selection order (a dropped backend counts as the one
       the solver then picks);
    7. keeps typed values (adding a flag beats changing or dropping a typed one);
    8. nearest value to the typed one;
    9. the order the candidates were proposed in (hints, other values, added flags, drops).
    """
    return (not f.kv_ok, f.size, f.hinted, f.added_warnings, f.checkpoint_set, f.slowness, f.typed_touched,
            round(f.distance, 6), f.order)


def pick(ranked: Sequence[Any], changed_flag: Callable[[Any], str | None], count: int,
         per_flag: int = 2) -> list[Any]:
    """The first `count` of `ranked` fixes, at most `per_flag` of them setting the same one size
    flag to other values (three tp sizes say less than a tp size and another way out); the ones
    passed over fill what room is left."""
    chosen, later, seen = [], [], {}
    for item in ranked:
        name = changed_flag(item)
        if name is not None and seen.get(name, 0) >= per_flag:
            later.append(item)
            continue
        if name is not None:
            seen[name] = seen.get(name, 0) + 1
        chosen.append(item)
    return (chosen + later)[:count]


def checkpoint_set(plan: Plan, changes: Sequence[tuple[str, Any]]) -> int:
    """How many checkpoint flags the changes set to a value of their own."""
    checkpoint = preferences_for(plan).checkpoint
    return sum(1 for name, value in changes if name in checkpoint and value is not None)


def slowness(plan: Plan, changes: Sequence[tuple[str, Any]], env: Env) -> int:
    """The summed fastest-first places of the values set (0 for flags without an order)."""
    speed = preferences_for(plan).speed
    return sum(speed_rank(plan, name, value, env) for name, value in changes if name in speed)


def rank(items: Iterable[Any], facts_of: Callable[[Any], FixFacts]) -> list[Any]:
    """Items best first by `fix_key` of their facts."""
    return sorted(items, key=lambda item: fix_key(facts_of(item)))
