"""A failed log read once: its text as a person reads it, secrets masked, the lines that say why it failed, and what the job's passing runs print too."""
