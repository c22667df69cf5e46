"""The exporter's HTTP side: its own HTTP/1.1 server (a selector loop holds idle
connections, a bounded pool of threads answers requests: server.py), the routes
(routes.py), request parsing (request.py), answers (answer.py), basic auth (auth.py).
No collector is imported here.
"""
