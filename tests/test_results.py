"""Unit tests for compensator.results: one value from an MCP tool result."""

from __future__ import annotations

from compensator.wire import parse_result, result_text


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def test_structured_content_wins() -> None:
    assert parse_result({"id": 1}, [text('{"id": 2}')]) == {"id": 1}


def test_structured_falsy_values_still_win() -> None:
    assert parse_result([], [text("[1]")]) == []
    assert parse_result(0, [text("5")]) == 0


def test_json_text_is_parsed() -> None:
    assert parse_result(None, [text('{"id": 3, "tags": ["x"]}')]) == {"id": 3, "tags": ["x"]}
    assert parse_result(None, [text("17")]) == 17


def test_plain_text_stays_text() -> None:
    assert parse_result(None, [text("Task 3 created")]) == "Task 3 created"


def test_several_text_blocks_are_joined() -> None:
    content = [text("[1,"), {"type": "image", "data": "xx", "mimeType": "image/png"}, text("2]")]
    assert parse_result(None, content) == [1, 2]
    assert parse_result(None, [text("a"), text("b")]) == "a\nb"


def test_no_text_blocks() -> None:
    assert parse_result(None, []) is None
    assert parse_result(None, None) is None
    assert parse_result(None, [{"type": "image", "data": "", "mimeType": "image/png"}]) is None


def test_result_text() -> None:
    assert result_text([text("boom"), {"type": "image"}, text("again")]) == "boom\nagain"
    assert result_text([]) == ""
    assert result_text(None) == ""
