"""The architecture's worked example, for any test to replay: ownership of the settlement connector moves
on 1 April, and the catalogue learns it on 3 May."""

from tests.support.harness import Ledger

CONNECTOR = "Component:cmdb:CI0042"
ANALYTICS = "Team:hr:T-ANA"
PLATFORM = "Team:hr:T-PLAT"


def late_correction(ledger: Ledger) -> Ledger:
    ledger.at("2026-03-01T00:00:00Z").change("cmdb", "ci/CI0042", version="6").asserts(
        CONNECTOR, "owned_by", ANALYTICS, valid_from=None, evidence="owner: Analytics").send()
    ledger.at("2026-05-03T09:00:00Z").change("cmdb", "ci/CI0042", version="7", event_id="cmdb-7781").asserts(
        CONNECTOR, "owned_by", PLATFORM, valid_from="2026-04-01", evidence="owner changed to Platform").send()
    return ledger
