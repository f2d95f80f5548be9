"""Feed adapters' pure core: a source's rows, through its mapping (``schemas.feed_mapping``), into
contract events. Reading files and topics is ``streams.feeds``'s job."""
