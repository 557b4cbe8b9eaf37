"""The rule language: flag catalogs, the safe expression language, rule files compiled into a rule
set (cached on disk), and the checks and graph export over it."""
