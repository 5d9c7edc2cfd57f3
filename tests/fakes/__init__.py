"""Fakes of outside services the tests cannot run for real (only Gemini so far)."""
