"""HTTP: the Flask app (app.py), its access checks (auth.py), the page (page.py), the
scrape-time collector (collector.py), the WSGI servers (server.py: one per listen address),
binding the listen addresses (listen.py), TLS from the web config (tls.py), and the record of
where the serving process listens, which `txnwatch healthcheck` (healthcheck.py) goes by
(record.py)."""
