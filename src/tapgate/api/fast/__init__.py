"""The faster paths tapgate keeps beside the framework's own, each because a bench row shows what it buys.

A process can leave any of them out (``TAPGATE_BYPASS_OFF=name,…``, read in ``bootstrap.py``; not a
setting): ``make bench BENCH_ARGS='--bypass NAME'`` measures tapgate with and without each in one run, and
tests/test_bypass_differential.py sends the same generated requests to a server with it and one without it
and finds the same answers and the same effect. Figures: ``make bench
BENCH_ARGS='--quick --turns 3 --bypass all'`` on a shared 2-core machine, SQLite, each the median of
three interleaved turns, as the ratio of the server without the path to the server with all of them.
Round-trip times and throughput moved by up to 2× between turns there (other work on the machine), so
the times below are the server's CPU a call and the memory of idle devices, which moved far less.

- ``first.py`` (``link``): the device WebSocket link served by the app before Starlette's and tapgate's
  middleware, which would each hold a frame for the link's life. Without it, an idle link costs 34.0 KiB
  against 23.5 (×1.45), some 100 MiB more for 10,000 idle devices.
- ``ahead.py`` with ``plan.py`` (``ahead``): the hot JSON requests served by one coroutine that does what
  the middleware, routing and FastAPI's handler would, where the request is in its route's plan. Without
  it, a held long-poll costs 32.1 KiB against 18.6 (×1.73), and the server's CPU a call is ×1.15 for a
  long-poll device and ×1.11 under the fifty-pair load.
- ``light_http.py`` (``light_http``): uvicorn's HTTP protocol with flags for its events and a pipeline made
  only when used. Without it, a held long-poll costs 21.0 KiB against 18.6 (×1.13).
- ``light_ws.py`` (``light_ws``): uvicorn's WebSocket protocol holding less for an idle link. Without it,
  an idle link costs 32.1 KiB against 23.5 (×1.37).
- The hot statements on sqlite3 (``raw_sql``; ``adapters/store/raw.py`` and ``sqlite_raw.py``, which stay
  with the store: an adapter is below the API). Without them, a round trip takes ×1.43 as long with a
  WebSocket device and ×1.30 with a long-poll one, and the server's CPU a call is ×1.78 and ×1.30. On
  PostgreSQL they are part of the unit of work on asyncpg (``postgres_raw.py``) and are not left out alone.

Measured and removed: plans inside FastAPI's own routing (a ``FastRoute`` class). With the planned
requests served ahead, the requests it served faster never reach it; leaving it out moved the round trips
by ×1.06 and ×1.01, within their turns' spread (0.99 to 1.10).
"""
