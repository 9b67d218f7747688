"""The running count infer shows while a check runs: plain lines per quarter when stderr is
a file or a pipe, a bar redrawn in place on a terminal, and a line said in between is never
glued to the bar."""

from __future__ import annotations

import io
import itertools

from pytest_compensator.infer import Ticker


def clock_of(*readings: float):
    values = itertools.chain(readings, itertools.repeat(readings[-1]))
    return lambda: next(values)


def test_plain_lines_one_per_quarter_with_the_seconds() -> None:
    out = io.StringIO()
    ticker = Ticker(out, tty=False, clock=clock_of(100.0, 101.0, 102.5, 104.0, 107.9))
    ticker.begin("add_item: reversible", 8)
    for _ in range(8):
        ticker.tick()
    ticker.end()
    assert out.getvalue().splitlines() == [
        "infer: add_item: reversible: 2/8 examples, 1 s",
        "infer: add_item: reversible: 4/8 examples, 2 s",
        "infer: add_item: reversible: 6/8 examples, 4 s",
        "infer: add_item: reversible: 8/8 examples, 8 s",
    ]


def test_a_check_past_its_total_is_shrinking_and_the_plain_lines_stop() -> None:
    out = io.StringIO()
    ticker = Ticker(out, tty=False, clock=clock_of(0.0))
    ticker.begin("x", 4)
    for _ in range(9):
        ticker.tick()
    assert out.getvalue().count("\n") == 4  # nothing more after 4/4
    tty = io.StringIO()
    bar = Ticker(tty, tty=True, clock=clock_of(0.0))
    bar.begin("x", 4)
    for _ in range(5):
        bar.tick()
    assert tty.getvalue().endswith("x: 5 examples, 0 s (shrinking a failure)")


def test_a_terminal_gets_a_bar_redrawn_in_place_and_wiped_before_other_lines() -> None:
    out = io.StringIO()
    ticker = Ticker(out, tty=True, clock=clock_of(0.0, 3.0))
    ticker.begin("create_entities: reversible", 4)
    ticker.tick()
    first = out.getvalue()
    bar = "[######------------------]"
    assert first == f"\r\x1b[Kinfer: {bar} create_entities: reversible: 1/4 examples, 3 s"
    ticker.tick()
    assert out.getvalue()[len(first) :].startswith("\r\x1b[Kinfer: [############------------]")
    ticker.clear()
    assert out.getvalue().endswith("\r\x1b[K")  # the next line starts at the left
    ticker.end()
    ticker.tick()  # after end(), nothing is counted or drawn
    assert out.getvalue().endswith("\r\x1b[K") and "\n" not in out.getvalue()


def test_nothing_is_written_before_a_check_begins() -> None:
    out = io.StringIO()
    ticker = Ticker(out, tty=True)
    ticker.tick()
    ticker.clear()
    ticker.end()
    assert out.getvalue() == ""
