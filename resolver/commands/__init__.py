"""The `accord` commands: thin front ends that parse options, call the libraries and print."""
