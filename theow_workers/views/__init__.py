"""Read views: what each screen (CLI, console, JSON API) shows, from the read model (``ports``)."""
