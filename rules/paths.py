"""Where the rule data lives: this folder, wherever Accord is installed (a checkout or a wheel).

The resolver (catalogs, rule files, fact presets) and the engine (built-in model configs) both find
their data from here, so neither has to know how the other is laid out.
"""

from pathlib import Path

RULES_DIR = Path(__file__).resolve().parent
MODELS_DIR = RULES_DIR / "models"
