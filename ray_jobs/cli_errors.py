"""The error a command raises for a command-line mistake. Its own module, so that the commands
(``export``, ...) raise it without importing the CLI that dispatches to them."""


class CliError(Exception):
    """A command-line mistake: one line on stderr, exit status 2."""
