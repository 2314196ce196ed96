"""Earshot: Qt front end and the services it drives."""

__version__ = "0.1.0"
