"""What the API does, written once: keyword-only actions that the HTTP routes (`api/routes/`)
and the web console's pages (`api/console/`) both call, so a page runs the same service, the same
checks and the same events as its route, and shows the same models (W1).

An action takes the backend and a caller already authenticated and allowed (the routes' role
dependencies, the console's `Page.require`), and returns a response model or raises a domain
error; what is HTTP (dependencies, status codes, bodies, problem+json) stays in the routes, what
is HTML in the console.
"""
