"""meta.properties: written once, read back, and every way it can be wrong is refused
with a message naming the file and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.broker import meta_properties
from sluice.broker.meta_properties import MetaProperties, MetaPropertiesError


def test_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    meta_properties.write(tmp_path, MetaProperties(7, "Yk3zP1y9QZ2s8bT0mXq4Lw"))
    text = (tmp_path / "meta.properties").read_text()
    assert "version=1\n" in text
    assert "node.id=7\n" in text
    assert "cluster.id=Yk3zP1y9QZ2s8bT0mXq4Lw\n" in text
    assert meta_properties.read(tmp_path) == MetaProperties(7, "Yk3zP1y9QZ2s8bT0mXq4Lw")


def test_a_directory_without_the_file_has_no_identity(tmp_path: Path) -> None:
    assert meta_properties.read(tmp_path) is None


def test_kafkas_own_file_with_comments_and_extra_keys_is_read(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Mon Nov 23 10:00:00 UTC 2026\ncluster.id=abc\ndirectory.id=xyz\nnode.id=1\nversion=1\n"
    )
    assert meta_properties.read(tmp_path) == MetaProperties(1, "abc")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("version=1\ncluster.id=abc\n", "no node.id line"),
        ("version=1\nnode.id=1\n", "no cluster.id line"),
        ("node.id=1\ncluster.id=abc\n", "no version line"),
        ("version=0\nbroker.id=1\nnode.id=1\ncluster.id=abc\n", "version=0"),
        ("version=1\nnode.id=one\ncluster.id=abc\n", "node.id=one, not a number"),
    ],
)
def test_a_damaged_file_is_refused_naming_it(tmp_path: Path, text: str, named: str) -> None:
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(MetaPropertiesError, match=named) as refused:
        meta_properties.read(tmp_path)
    assert str(tmp_path / "meta.properties") in str(refused.value)


def test_another_node_id_is_refused_with_both_ids_and_the_fix(tmp_path: Path) -> None:
    stored = MetaProperties(0, "abc")
    meta_properties.check_node_id(tmp_path, stored, 0)
    with pytest.raises(MetaPropertiesError) as refused:
        meta_properties.check_node_id(tmp_path, stored, 3)
    message = str(refused.value)
    assert "node.id=0" in message
    assert "node id 3" in message
    assert "--node-id 0" in message


def test_another_cluster_is_refused(tmp_path: Path) -> None:
    stored = MetaProperties(0, "abc")
    meta_properties.check_cluster_id(tmp_path, stored, "abc")
    with pytest.raises(MetaPropertiesError, match="cluster abc"):
        meta_properties.check_cluster_id(tmp_path, stored, "def")
