"""A CRD counts as served only once its Established condition is True; one just created has no conditions yet."""

import yaml

from specfleet_workshop.devcluster.crds import _not_established, crd_names, is_established


def crd(name: str, conditions: object = None, with_status: bool = True) -> dict[str, object]:
    body: dict[str, object] = {"kind": "CustomResourceDefinition", "metadata": {"name": name}}
    if with_status:
        body["status"] = {"conditions": conditions}
    return body


ESTABLISHED = [{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]


def test_a_crd_without_conditions_yet_is_not_established_rather_than_an_error() -> None:
    assert not is_established(crd("a", with_status=False))
    assert not is_established(crd("a", conditions=None))
    assert not is_established(crd("a", conditions=[]))
    assert not is_established(crd("a", conditions=[{"type": "NamesAccepted", "status": "True"}]))
    assert not is_established(crd("a", conditions=[{"type": "Established", "status": "False"}]))
    assert is_established(crd("a", conditions=ESTABLISHED))


def test_the_names_still_waited_for_come_from_one_object_or_a_list() -> None:
    assert _not_established(crd("a", conditions=ESTABLISHED), ["a"]) == []
    listed = {"kind": "List", "items": [crd("a", conditions=ESTABLISHED), crd("b", conditions=None)]}
    assert _not_established(listed, ["a", "b"]) == ["b"]


def test_crd_names_are_read_from_every_crd_document_of_a_manifest() -> None:
    namespace = {"kind": "Namespace", "metadata": {"name": "n"}}
    manifest = yaml.safe_dump_all([crd("a.x.io"), namespace, None, crd("b.x.io")])
    assert crd_names(manifest) == ["a.x.io", "b.x.io"]
