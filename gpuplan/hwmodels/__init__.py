"""hwmodels."""
