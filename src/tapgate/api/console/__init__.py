"""The person's console at /console: server-rendered pages (Jinja2, htmx) over the gateway's use cases."""
