"""Feed mapping files: the shipped ones fit the default ontology, and a bad one is refused in one line
naming the file, the field and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.config_files import ConfigFileError
from schemas.feed_mapping import load_mapping
from schemas.ontology import default_ontology

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "deploy" / "feeds").glob("*.yaml"))


def test_the_shipped_mappings_are_there_and_fit_the_default_ontology() -> None:
    assert [path.name for path in SHIPPED] == ["hr-directory.yaml", "servicenow-cmdb.yaml"]
    for path in SHIPPED:
        load_mapping(path, default_ontology())


TABLE = """
system: cmdb
tables:
  cmdb_ci:
    key: sys_id
    entity: {type: Service, id: "cmdb:{sys_id}", name: name}
"""


@pytest.mark.parametrize(("text", "says"), [
    ("system: [unclosed", "not YAML at line 1"),
    ("tables: {}", "system: Field required"),
    ("system: cmdb\ntables: {}", "tables: Dictionary should have at least 1 item"),
    (TABLE + "    edges: [{rel: owned_by, dst: {ref: sys_user_group, column: support_group}}]",
     "tables.cmdb_ci.edges[0].dst: ref 'sys_user_group' is not a table of this mapping"),
    (TABLE + "    edges: [{rel: owned_by, dst: {type: Team, id: 'hr:{team_id:>4}'}}]",
     "without a format"),
    (TABLE + "    edges: [{rel: owned_by, dst: {type: Team, id: 'hr:team'}}]", "names no column"),
    (TABLE + "    edges: [{rel: owned_by, dst: {type: Team, idd: 'hr:{x}'}}]",
     "tables.cmdb_ci.edges.0.dst.entity.idd: Extra inputs are not permitted"),
    (TABLE + "    effective: {column: updated, timezone: Mars/Olympus}", "unknown time zone 'Mars/Olympus'"),
    (TABLE + "    edges: [{rel: owns, dst: {type: Team, id: 'hr:{x}'}}]",
     "tables.cmdb_ci.edges[0].rel: 'owns' is not a relationship of the ontology"),
    (TABLE.replace("type: Service", "type: {column: cls, map: {a: Servce}}"),
     "tables.cmdb_ci.entity.type: 'Servce' is not an entity type of the ontology"),
    ("system: hr\ntables:\n  t: {key: k, edges: [{rel: member_of, dst: {type: Team, id: 'hr:{x}'}}]}",
     "edges[0] starts or ends at 'self', but the table has no 'entity'"),
    ("system: hr\ntables:\n  t: {key: k, entity: {type: Person, id: 'hr:{k}', missing_id: name}}",
     "missing_id 'name' needs a 'name' column"),
])
def test_a_bad_mapping_is_refused_naming_the_file_the_field_and_the_reason(tmp_path: Path, text: str,
                                                                           says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)

    with pytest.raises(ConfigFileError) as refused:
        load_mapping(path, default_ontology())

    message = str(refused.value)
    assert message.startswith(f"{path} is not a valid feed mapping: ") and "\n" not in message
    assert says in message, message
