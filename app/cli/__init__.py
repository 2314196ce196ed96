"""The `earshot` command line: `main.py` builds the parser and dispatches; one module per command."""
