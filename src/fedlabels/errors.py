"""User-facing errors.

Every error a user can trigger with bad input is a :class:`FedLabelsError` whose message
says what is wrong and how to fix it; the CLI prints it without a traceback.
"""

from __future__ import annotations


class FedLabelsError(ValueError):
    """Invalid input or configuration, with a message meant for the user."""


class DatasetNotFetchedError(FedLabelsError):
    """A registered dataset exists but its files are not in the local cache yet."""
