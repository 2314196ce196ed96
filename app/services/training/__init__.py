"""Training runs as folders and processes, and the Train tab's presets."""
