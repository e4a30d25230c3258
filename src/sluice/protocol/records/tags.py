"""The record header that tags a record for tag-filtered views."""

from typing import Final

TAG_HEADER: Final = "x-sluice-tag"
"""A record's tags: the values of its ``x-sluice-tag`` headers (it may carry several)."""
