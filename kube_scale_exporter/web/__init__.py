"""The exporter's own HTTP/1.1 server: a selector loop holds idle connections, a bounded
pool of threads answers requests (kube_scale_exporter/web/server.py); request parsing and
answers (request.py); basic auth (auth.py). No collector is imported here.
"""
