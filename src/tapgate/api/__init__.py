"""The HTTP edge: routes, authentication, error mapping."""
