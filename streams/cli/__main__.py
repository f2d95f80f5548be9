"""``python -m streams.cli``: the ``edgeledger`` command line."""

from streams.cli.main import main

main()
