"""Secrets never reach the terminal: values registered here are masked in whatever the CLI prints
when a command fails (its one-line error or a traceback)."""
from __future__ import annotations

REDACTED = "[redacted]"
_MIN_SECRET_CHARS = 4  # shorter values would mask ordinary text
_SECRETS: set[str] = set()


def register_secret(value: str) -> None:
    """Masks `value` (and its whitespace-stripped form: a repr shows a trailing newline as `\\n`)."""
    for form in (value, value.strip()):
        if len(form) >= _MIN_SECRET_CHARS:
            _SECRETS.add(form)


def redact(text: str) -> str:
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text
