"""Assertions shared by the tests of explanations: what "minimal conflict" means, checked."""


def assert_conflict_is_minimal(plan, user, facts, conflict):
    """The conflict's user values and rules are unsatisfiable together, and lose that without any one."""
    subset = {k: user[k] for k in conflict.flags}
    rules = [r for r in plan.hard_rules if r.id in conflict.rules]
    assert not plan.satisfiable(subset, facts, rules)
    for name in conflict.flags:
        assert plan.satisfiable({k: v for k, v in subset.items() if k != name}, facts, rules)
    for rule in rules:
        assert plan.satisfiable(subset, facts, [r for r in rules if r is not rule])
