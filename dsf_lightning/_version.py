"""The package version (one place: read by the package root, the hub folders' config.json and the cards)."""

__version__ = "0.1.0"
