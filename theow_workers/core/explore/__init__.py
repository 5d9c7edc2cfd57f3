"""New rules and actions: an LLM exploring an unmatched failure, a person pointing at lines, and the proposals both make."""
