"""slotgate node package."""
