"""The API keys of the HTTP front end: where each may come from, and how /server_info hides them.

SGLang takes --api-key / --admin-api-key on the command line, where `ps` shows them; Accord also
reads each from an environment variable, or from a file an environment variable names. Imports no
torch.
"""

from __future__ import annotations

from accord.resolver.errors import UsageError

SECRET_KEYS = ("api_key", "admin_api_key")
# Where a key can come from instead of argv (where `ps` shows it): an environment variable holding
# the key, or one naming a file that holds it. SGLang itself only has --api-key / --admin-api-key.
KEY_SOURCES = {"api_key": ("ACCORD_API_KEY", "ACCORD_API_KEY_FILE"),
               "admin_api_key": ("ACCORD_ADMIN_API_KEY", "ACCORD_ADMIN_API_KEY_FILE")}


def secret(name: str, from_config: str | None, environ) -> str | None:
    """The key `name` from exactly one of: its flag, its environment variable, its file (named by
    an environment variable). More than one, an unreadable or an empty file is a UsageError; the
    key itself is never part of a message."""
    variable, file_variable = KEY_SOURCES[name]
    flag = "--" + name.replace("_", "-")
    given = [what for what, present in ((flag, from_config is not None), (variable, variable in environ),
                                        (file_variable, file_variable in environ)) if present]
    if len(given) > 1:
        raise UsageError(f"the {name.replace('_', ' ').replace('api', 'API')} is given more than once "
                         f"({' and '.join(given)}); keep one of them.")
    if file_variable in environ:
        path = environ[file_variable]
        try:
            with open(path, encoding="utf-8") as fh:
                value = fh.read().strip()
        except OSError as err:
            raise UsageError(f"{file_variable}={path}: cannot read the key file ({err.strerror}); "
                             "point it at a readable file holding the key.") from None
        if not value:
            raise UsageError(f"{file_variable}={path}: the key file is empty; write the key into it.")
        return value
    if variable in environ:
        if not environ[variable]:
            raise UsageError(f"{variable} is set but empty; set it to the key or unset it.")
        return environ[variable]
    return from_config


def redacted(info: dict) -> dict:
    """The config as /server_info shows it: secrets replaced by a marker saying one is set."""
    values = dict(info.get("values", {}))
    for key in SECRET_KEYS:
        if values.get(key) is not None:
            values[key] = "<redacted>"
    provenance = dict(info.get("provenance", {}))
    for key in SECRET_KEYS:
        if isinstance(provenance.get(key), dict):
            provenance[key] = {"source": provenance[key].get("source")}
    return {**info, "values": values, "provenance": provenance}


