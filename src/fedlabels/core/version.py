"""The fedlabels version of this source tree (``pyproject.toml`` says the same)."""

__version__ = "0.1.0"
