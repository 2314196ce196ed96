"""Services the front ends drive. No Qt widgets here."""
