"""Qt widgets: one module per tab (with its parts beside it), the Search tab's Qt-free state, shared plot widgets."""
