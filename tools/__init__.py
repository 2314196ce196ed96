"""Developer tools beside the product (not installed): the README screenshots."""
