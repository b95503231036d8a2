"""A module two packages deep."""
