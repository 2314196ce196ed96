"""Live speech units: the session, input levels, TextGrid export."""
