"""The one exception type for mistakes a user can make and fix.

Every user-facing error says three things: what is wrong, where (file:line and the key path),
and how to fix it (valid options, the nearest valid name). The CLI prints it and exits 2; the
Python API raises it unchanged, so a notebook shows the same message as the shell.
"""
from __future__ import annotations


class HpctrainError(Exception):
    """A mistake in the user's input or environment, with where and how to fix it."""

    def __init__(self, what: str, where: str | None = None, fix: str | None = None):
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"{self.where}: {self.what}" if self.where else self.what
        return f"{head}\n  fix: {self.fix}" if self.fix else head


def nearest(name: str, options) -> str | None:
    """The closest valid name to a misspelt one, or None when nothing is close."""
    import difflib  # only when an error is being explained, not on every render
    found = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, options) -> str:
    options = sorted(options)
    close = nearest(name, options)
    valid = ", ".join(options)
    return f"did you mean '{close}'? valid: {valid}" if close else f"valid: {valid}"
