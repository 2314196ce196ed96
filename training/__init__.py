"""Trainers on one Trainer loop, corpus builders, evaluation and metrics. No Qt, no app/."""
