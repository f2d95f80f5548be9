"""The main job: the demo, streamed through the pipeline and loaded offline, tells the same story."""

import io
import re
from pathlib import Path

import pytest

from streams.cli.demo import run_demo


def answers(text: str) -> list[list[str]]:
    """The result entities under each '== question' heading."""
    sections = text.split("\n== ")[1:]
    return [re.findall(r"=> (.+?)(?:  \(.*)?$", section, flags=re.MULTILINE) for section in sections]


@pytest.mark.integration
def test_streamed_demo_gives_three_different_answers(kafka_broker, tmp_path: Path) -> None:
    out = io.StringIO()
    run_demo(tmp_path / "state", bootstrap=kafka_broker.bootstrap, out=out)
    now, on_april_22, believed_then, approvals, etl = answers(out.getvalue())[:5]
    assert now == on_april_22 == ["Team:hr:T-PLAT"]
    assert believed_then == ["Team:hr:T-ANA"]
    assert sorted(approvals) == ["ApprovalRole:role:change-manager", "ApprovalRole:role:risk-approver",
                                 "ApprovalRole:role:service-owner"]
    assert sorted(etl) == ["Team:hr:T-FINOPS", "Team:hr:T-PLAT"]  # the sheet's team, merged into HR's FinOps
    assert "balanced=True" in out.getvalue()


def test_offline_demo_tells_the_same_story(tmp_path: Path) -> None:
    out = io.StringIO()
    run_demo(tmp_path / "state", offline=True, out=out)
    assert answers(out.getvalue())[:3] == [["Team:hr:T-PLAT"], ["Team:hr:T-PLAT"], ["Team:hr:T-ANA"]]
    assert "agent-run-0422 [approval_routing] used e581374abda4fabaa, since corrected" in out.getvalue()
