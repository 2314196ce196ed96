"""The runtime both the app and the trainers stand on: one audio path, checkpoints, load_for_inference."""
