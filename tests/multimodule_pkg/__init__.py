"""A package nested in the tests package."""
