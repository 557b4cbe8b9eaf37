"""Solving: the plan that orders decisions, the solver that picks each unset choice's most preferred
legal value, and a launch's answers (`launch.Launch`): about itself, and fast about the commands
that change or pin a few of its flags."""
