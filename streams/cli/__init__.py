"""The ``edgeledger`` command line (``main``), with the commands' rendering and the demo."""
