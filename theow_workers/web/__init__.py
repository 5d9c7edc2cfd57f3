"""``theow web``: the review console, and failures, rules, insight and replays, in a browser.

Server-rendered (Starlette, Jinja2, Pygments), no JavaScript, no build step:
templates and CSS ship inside this package. It reads the SQL store the
workers write and approves through the review service the CLI uses.
Authentication as for Flower: no ``THEOW_WEB_PASSWORD``, no console
(``auth.py`` says how sessions, roles and CSRF tokens work).
"""
