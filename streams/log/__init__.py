"""The ``edge-versions`` log: the records a committed batch emits (``outbox``) and their reading
back (``records``), both compiled with the core, and the query replica that materialises them
(``replica``)."""
