"""Qt widgets, one module per tab plus shared plot widgets."""
