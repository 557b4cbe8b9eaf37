"""The rule expression language: what it accepts, what it refuses, and how unknown facts behave."""

import pytest

from accord.resolver.language.expr import parse
from accord.resolver.language.expr_compiler import ExpressionError
from accord.resolver.language.expr_runtime import UnknownFact, version


class Env:
    def __init__(self, flags=None, facts=None, user=()):
        self.flags, self.facts, self.user = flags or {}, facts or {}, set(user)

    def flag(self, name):
        return self.flags.get(name)

    def fact(self, key):
        if key not in self.facts:
            raise UnknownFact(key)
        return self.facts[key]

    def is_set(self, name):
        return name in self.user

    def user_value(self, name):
        return self.flags.get(name) if name in self.user else None


def test_names_split_into_flags_and_facts():
    expr = parse("tp_size % dp_size == 0 and gpu.sm >= 90 and platform == 'cuda'")
    assert expr.flags == {"tp_size", "dp_size"}
    assert expr.facts == {"gpu.sm", "platform"}


@pytest.mark.parametrize("source, expected", [
    ("tp_size * 2 + 1", 17),
    ("tp_size // 3", 2),
    ("attention_backend in ('fa3', 'flashinfer')", True),
    ("attention_backend not in ['fa3']", True),
    ("8192 if gpu.mem_gib >= 60 else 2048", 8192),
    ("min(tp_size, 4)", 4),
    ("max(missing_flag, 3)", 3),
    ("pow2_floor(12)", 8),
    ("round(62464 / 81920, 3)", 0.762),  # upstream's round() of 0.7625 (memory_hook.py:327), not half-up
    ("round(missing_flag, 3)", None),
    ("capped([1, 2, 4, 8, 16], 10)", [1, 2, 4, 8, 10]),
    ("capped(range(1, 5), 4)", [1, 2, 3, 4]),
    ("startswith(model.architecture, 'Deepseek')", True),
    ("contains(model.architecture, 'V3')", True),
    ("known(gpu.sm) and not known(model.head_dim)", True),
    ("is_set(tp_size) and not is_set(dp_size)", True),
    ("user_value(tp_size) == 8 and user_value(attention_backend) is None", True),
    ("version(cuda) >= version('12.8')", True),
    ("version(torch) < version('2.8')", False),
    ("-tp_size", -8),
])
def test_evaluation(source, expected):
    env = Env({"tp_size": 8, "attention_backend": "flashinfer", "dp_size": None},
              {"gpu.mem_gib": 80, "gpu.sm": 90, "cuda": "12.9", "torch": "2.8.0+cu128",
               "model.architecture": "DeepseekV3ForCausalLM"}, user={"tp_size"})
    assert parse(source)(env) == expected


def test_none_is_forgiving_in_ordering_and_arithmetic():
    env = Env({"chunked_prefill_size": None})
    assert parse("chunked_prefill_size > 0")(env) is False
    assert parse("chunked_prefill_size <= 0")(env) is False
    assert parse("chunked_prefill_size * 2")(env) is None
    assert parse("chunked_prefill_size is None")(env) is True


def test_division_by_zero_is_none_not_a_crash():
    env = Env({"tp_size": 8, "ep_size": 0})
    assert parse("tp_size % ep_size")(env) is None
    assert parse("tp_size % ep_size == 0")(env) is False


def test_unknown_fact_raises_and_short_circuit_avoids_it():
    with pytest.raises(UnknownFact) as err:
        parse("model.num_attention_heads % tp_size == 0")(Env({"tp_size": 2}))
    assert err.value.key == "model.num_attention_heads"
    assert parse("known(model.num_attention_heads) and model.num_attention_heads > 1")(Env()) is False


@pytest.mark.parametrize("source", [
    "__import__('os')",
    "tp_size.__class__",
    "(lambda: 1)()",
    "[x for x in range(3)]",
    "open('f')",
    "tp_size ** 2",
    "a = 1",
    "f'{tp_size}'",
])
def test_forbidden_constructs_are_refused(source):
    with pytest.raises(ExpressionError):
        parse(source)


def test_is_set_takes_only_a_flag():
    with pytest.raises(ExpressionError):
        parse("is_set(gpu.sm)")


def test_yaml_scalars_are_constants():
    assert parse(64)(Env()) == 64
    assert parse(True)(Env()) is True


def test_version_parsing():
    assert version("12.8") == (12, 8)
    assert version("2.8.0+cu128") == (2, 8, 0)
    assert version("0.6.18rc1") == (0, 6, 18)
    assert version(None) is None


class DefaultsEnv(Env):
    """An env whose catalog defaults are given, for `user_changed`."""

    def __init__(self, flags, user, defaults):
        super().__init__(flags, {}, user)
        self.defaults = defaults

    def default(self, name):
        return self.defaults[name]


def test_user_changed_means_typed_a_value_other_than_the_default():
    from accord.resolver.language.expr import constant
    names = {"moe_options": constant("moe_options", ("deepep_mode", "enable_eplb"))}
    defaults = {"deepep_mode": "auto", "enable_eplb": False, "tp_size": 1}
    changed = parse("user_changed(moe_options)", names)
    assert changed.set_checks == {"deepep_mode", "enable_eplb"} and not changed.flags
    # typing the default changes nothing; a resolved (not typed) non-default value is not the user's
    assert not changed(DefaultsEnv({"deepep_mode": "auto"}, {"deepep_mode"}, defaults))
    assert not changed(DefaultsEnv({"enable_eplb": True}, (), defaults))
    assert changed(DefaultsEnv({"enable_eplb": True}, {"enable_eplb"}, defaults))
    assert parse("user_changed(tp_size)")(DefaultsEnv({"tp_size": 2}, {"tp_size"}, defaults))


def test_user_changed_takes_a_flag_or_a_named_set():
    with pytest.raises(ExpressionError):
        parse("user_changed(gpu.sm)")
    with pytest.raises(ExpressionError):
        parse("user_changed(big)", {"big": parse("tp_size > 4")})


# -- meta(flag).prop: a property of a flag's value, from the catalog's choice metadata --------------

class _Property:
    def __init__(self, name, default, values):
        self.name, self.default, self.values = name, default, tuple(values)


KERNELS = {"kernel": (_Property("vendor", None, [("k1", "acme"), ("k2", "acme"), ("k3", "other")]),
                      _Property("pages", None, [("k1", (16, 64))]),
                      _Property("fast", False, [("k2", True)]))}


@pytest.mark.parametrize("value, vendor, pages, fast", [
    ("k1", "acme", (16, 64), False),
    ("k2", "acme", None, True),
    ("k3", "other", None, False),
    ("k9", None, None, False),     # a value outside the table (an extensible flag): the defaults
    (None, None, None, False),     # an unset flag: the defaults
])
def test_meta_reads_the_property_of_the_flags_current_value(value, vendor, pages, fast):
    env = Env({"kernel": value})
    assert parse("meta(kernel).vendor", meta=KERNELS)(env) == vendor
    assert parse("meta(kernel).pages", meta=KERNELS)(env) == pages
    assert parse("meta(kernel).fast", meta=KERNELS)(env) is fast
    assert parse("64 in meta(kernel).pages", meta=KERNELS)(env) is (pages is not None)


def test_meta_reads_the_flag_and_is_named_among_the_expressions_names():
    expr = parse("meta(kernel).vendor == 'acme' and tp_size > 1", meta=KERNELS)
    assert expr.flags == {"kernel", "tp_size"}
    assert expr.names == {"meta(kernel).vendor"}
    assert expr.code is not None   # plain generated code: the table is folded in as constants


@pytest.mark.parametrize("source, named", [
    ("meta(kernel).vendr", "no property 'vendr'"),
    ("meta(tp_size).vendor", "flag 'tp_size' has no choice metadata"),
    ("meta(kernel)", "write meta(flag).property"),
    ("meta(gpu.sm).vendor", "takes one flag name"),
    ("meta(kernel, tp_size).vendor", "takes one flag name"),
])
def test_meta_of_an_unknown_flag_or_property_is_refused_naming_it(source, named):
    with pytest.raises(ExpressionError, match=named.replace("(", r"\(").replace(")", r"\)")):
        parse(source, meta=KERNELS)
