"""The course on a JupyterHub: ./course hub (hub.py), its JupyterHub config and the exchange (course_exchange.py)."""
