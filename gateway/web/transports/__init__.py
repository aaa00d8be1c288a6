"""Browser channels: thin maps from core events to the wire."""
