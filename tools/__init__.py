"""Course tooling run from the checkout (not installed): the ./course command."""
