"""slotgate protocol package."""
