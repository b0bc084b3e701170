"""``workgroup console``: a live web page of every group a coordinator knows.

:mod:`~workgroup.console.model` turns what the console reads into the view (no
I/O); :mod:`~workgroup.console.server` reads the coordinator and serves the page
and its live updates; ``static/`` holds the page itself (no build step, no CDN).
"""
