"""The ``edge-versions`` log: the records a committed batch emits (``records``, compiled with the
core) and the query replica that materialises them (``replica``)."""

from processors.native import prefer_compiled

prefer_compiled(__path__, "streams/log")
