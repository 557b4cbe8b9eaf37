"""The `accord` subcommands, one module each, imported only when that command runs."""
