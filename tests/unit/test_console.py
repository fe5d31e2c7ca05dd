"""The web console's pieces without a cluster: the lag history's bounds and its SVG chart,
displayed bytes (truncation, text or hex), timestamps in the message browser's form, and the
``--command-config`` properties ``odradek console`` accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from odradek.cli.console import ConsoleStartError, load_props
from odradek.console import lag_history
from odradek.console.browse import MAX_SHOWN_BYTES, Shown
from odradek.console.lag_history import LagHistory, lag_chart_svg
from odradek.console.web import BadRequest, format_ts, parse_timestamp


def test_lag_history_keeps_the_last_samples_of_a_bounded_number_of_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lag_history, "MAX_GROUPS", 3)
    h = LagHistory(max_samples=4)
    for i in range(10):
        h.record("g", i, {"t": i}, now_s=float(i))
    assert [s.total for s in h.samples("g")] == [6, 7, 8, 9]
    for name in ("a", "b", "c"):
        h.record(name, 1, {}, now_s=0.0)
    assert h.samples("c") == []  # a fourth group is not tracked
    h.retain({"a"})
    assert h.samples("g") == [] and len(h.samples("a")) == 1
    h.record("c", 5, {}, now_s=1.0)  # room again
    assert [s.total for s in h.samples("c")] == [5]


def test_lag_history_keeps_at_most_max_topics_per_sample() -> None:
    h = LagHistory()
    h.record("g", 0, {f"t{i:02}": i for i in range(20)}, now_s=0.0)
    assert len(h.samples("g")[0].by_topic) == lag_history.MAX_TOPICS


def _points(svg: str) -> list[list[tuple[float, float]]]:
    return [[(float(x), float(y)) for x, y in (p.split(",") for p in pts.split())]
            for pts in re.findall(r'<polyline[^>]* points="([^"]+)"', svg)]


def test_lag_chart_draws_the_total_over_time_scaled_to_the_plot() -> None:
    h = LagHistory()
    for t, lag in enumerate([0, 50, 100, 25]):
        h.record("g", lag, {"orders": lag}, now_s=1000.0 + t)
    svg = lag_chart_svg(h.samples("g"))
    (line,) = _points(svg)  # one topic: the total only
    xs, ys = [x for x, _ in line], [y for _, y in line]
    assert xs == sorted(xs) and xs[0] == 60.0 and xs[-1] == 570.0  # the plot's left and right edges
    assert ys[0] == 210.0 and ys[2] == 10.0  # 0 at the bottom, the maximum (100) at the top
    assert ys[1] == pytest.approx(110.0) and ys[3] == pytest.approx(160.0)
    assert ">total 25</text>" in svg


def test_lag_chart_draws_a_line_per_topic_and_escapes_their_names() -> None:
    h = LagHistory()
    h.record("g", 3, {"<script>a": 1, "b&c": 2}, now_s=0.0)
    h.record("g", 5, {"<script>a": 2, "b&c": 3}, now_s=10.0)
    svg = lag_chart_svg(h.samples("g"))
    assert len(_points(svg)) == 3
    assert "<script" not in svg and "&lt;script&gt;a 2" in svg and "b&amp;c 3" in svg


def test_lag_chart_without_samples_or_with_one() -> None:
    assert "no samples yet" in lag_chart_svg([])
    h = LagHistory()
    h.record("g", 7, {}, now_s=0.0)
    svg = lag_chart_svg(h.samples("g"))
    assert "<circle" in svg and "<polyline" not in svg


def test_shown_bytes_are_cut_and_shown_as_text_or_hex() -> None:
    long = Shown.of(b"x" * (MAX_SHOWN_BYTES + 10))
    assert long.truncated and long.length == MAX_SHOWN_BYTES + 10 and len(long.text()) == MAX_SHOWN_BYTES
    assert Shown.of(b"\x00\xff").hex() == "00 ff" and not Shown.of(b"\x00\xff").is_text
    assert Shown.of("héllo\tw\r\n".encode()).is_text
    assert not Shown.of(b"\x01\x02").is_text  # valid UTF-8, but control characters: hex
    cut = Shown.of(b"a" * (MAX_SHOWN_BYTES - 1) + "é".encode())  # a character cut in two is still text
    assert cut.truncated and cut.is_text
    null = Shown.of(None)
    assert null.data is None and not null.truncated and null.length == -1


def test_timestamps_in_milliseconds_or_iso_8601() -> None:
    assert parse_timestamp("1700000000000") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000  # UTC when no zone is given
    assert parse_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(BadRequest):
        parse_timestamp("yesterday")
    assert format_ts(1_700_000_000_123) == "2023-11-14 22:13:20.123 UTC"
    assert format_ts(-1) == "-"


def test_command_config_security_checked_at_start(tmp_path: Path) -> None:
    ok = tmp_path / "ok.properties"
    ok.write_text("client.id=watcher\nrequest.timeout.ms=5000\nsecurity.protocol=PLAINTEXT\n")
    assert load_props(str(ok))["client.id"] == "watcher"
    for text, message in [
        ("security.protocol=SASL_SSL\n", "sasl.mechanism=GSSAPI (Kerberos) is not supported"),
        ("security.protocol=TLS\n", "Invalid value TLS for configuration security.protocol"),
        ("sasl.login.class=x.Y\n", "sasl.login.class is not supported"),
        ("request.timeout.ms=soon\n", "Invalid value soon for configuration request.timeout.ms"),
    ]:
        bad = tmp_path / "bad.properties"
        bad.write_text(text)
        with pytest.raises(ConsoleStartError, match=re.escape(message)):
            load_props(str(bad))
    with pytest.raises(ConsoleStartError, match="cannot read --command-config"):
        load_props(str(tmp_path / "missing.properties"))
