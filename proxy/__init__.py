"""slotgate proxy package."""
