"""relay: the pure library (torch + stdlib + transformers). Never imports ray."""
