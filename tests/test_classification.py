"""What each classification means, checked for consistency, and the meta tools' names."""

from __future__ import annotations

import pytest

from compensator.classification import Classification
from compensator.names import META_TOOLS
from compensator.proxy.meta import META_TOOL_DEFINITIONS


@pytest.mark.parametrize("kind", list(Classification), ids=lambda kind: kind.value)
def test_every_classification_says_what_it_means(kind: Classification):
    facts = kind.behaviour  # a member without an entry in the table fails here
    assert not facts.undoable or facts.journaled, "undo needs the journaled call"
    assert not facts.snapshot or facts.undoable, "a snapshot serves only undo"
    assert not facts.exercised or facts.undoable, "the plugin round-trips what undo covers"
    if facts.journaled and not facts.undoable:
        assert kind.refusal("s__t").startswith(f"{kind.value}: ")
    text = kind.explanation("s__t", snapshot_tool="s__get", inverse_tools=["s__undo"])
    assert text.startswith("s__t ") and "{" not in text


def test_only_unknown_cannot_be_written_and_unknown_names_are_refused():
    assert Classification.UNKNOWN not in Classification.writable()
    assert set(Classification.writable()) == set(Classification) - {Classification.UNKNOWN}
    # A journal written by a newer version may name a classification this one does not know.
    assert Classification.named("quarantined") is Classification.UNKNOWN
    assert Classification.named("reversible") is Classification.REVERSIBLE


def test_meta_tool_names_are_those_the_proxy_defines():
    assert {definition["name"] for definition in META_TOOL_DEFINITIONS} == META_TOOLS
