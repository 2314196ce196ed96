"""Acoustic word embeddings as the Words tab and the CLI use them."""
