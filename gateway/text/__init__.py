"""The text front-end: what an LLM writes, as segments to show and to say (docs/TEXT.md)."""
