"""The benchmark suite (``make bench``, ``python -m bench``): real gateways on loopback against a floor.

- ``floor``: the in-memory Starlette app every ratio is taken against, served like tapgate.
- ``servers``: ``tapgate serve`` and the floor as processes; their settings and databases.
- ``seed``: tenants, people, agents and devices for each measurement.
- ``client``: the load client, a process of its own; ``wire``: its lean HTTP and WebSocket protocols.
- ``stage``: the sizes, the running servers and load clients a measurement shares; ``meter``: CPU and
  memory of each side; ``scenarios``: how each row is measured; ``verify``: the in-process verify rates;
  ``profile``: py-spy samples of the servers (``--profile``).
- ``rows``: the rows and their targets; ``runner``: the order of the run; ``report``: table, JSON, plot.
"""
