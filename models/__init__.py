"""Pure PyTorch models: one file per model, each with a @dataclass config."""
