"""`accord ui`: the configurator page and its JSON API, which answers with the command line's own
output."""
