"""The review item for a value of a single-valued relationship that another source contradicts: both
values are kept, and a person decides."""

from __future__ import annotations

from processors.model import EdgeVersion, ReviewItem


def conflict_item(review_id: str, event_id: str, tx: int, survivors: list[EdgeVersion],
                  rivals: list[EdgeVersion]) -> ReviewItem:
    """The review item for a single-valued relationship's value that another source contradicts."""
    value = survivors[0]  # every survivor is a piece of the same value
    return ReviewItem(
        review_id=review_id, tenant=value.tenant, event_id=event_id, tx_at=tx, category="cardinality_conflict",
        reason=(f"{value.src} {value.rel} has competing values from different sources "
                f"({value.authority}: {value.dst}; " + "; ".join(f"{v.authority}: {v.dst}" for v in rivals)
                + "); both are kept until a person decides"),
        details={"new_edge_id": value.edge_id, "new_edge_ids": [v.edge_id for v in survivors],
                 "competing_edge_ids": [v.edge_id for v in rivals]},
    )
