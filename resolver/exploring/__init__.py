"""Exploring the legal space: the legal values of each choice (dry run), CI matrices of legal
configurations, and the helpers that run test suites over them."""
