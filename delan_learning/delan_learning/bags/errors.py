"""The errors and warnings of bag reading and writing."""


class BagError(ValueError):
    """A bag that cannot be used (missing, unreadable, or without the data asked for)."""


class BagWarning(UserWarning):
    """Data was read from a damaged bag (truncated file, missing metadata.yaml)."""
