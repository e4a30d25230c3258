"""The console's pure parts: rates and lag, value formatting, SVG charts."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import pytest

from sluice.console import charts, formatting
from sluice.console.sampler import lag_of, rate_per_s


def test_rate_is_records_per_second_between_two_points() -> None:
    assert rate_per_s((10.0, 100), (12.0, 160)) == 30.0
    assert rate_per_s((10.0, 100), (12.0, 100)) == 0.0


def test_rate_is_zero_when_the_offset_goes_back_or_no_time_passed() -> None:
    assert rate_per_s((10.0, 100), (12.0, 5)) == 0.0
    assert rate_per_s((10.0, 100), (10.0, 200)) == 0.0


def test_lag_is_end_minus_committed_and_never_negative() -> None:
    assert lag_of(end_offset=10, committed=4) == 6
    assert lag_of(end_offset=10, committed=10) == 0
    assert lag_of(end_offset=10, committed=12) == 0


def test_text_json_and_hex_views() -> None:
    data = b'{"b": [1, 2], "a": "\xc3\xa9"}'
    assert formatting.format_bytes(data, "text").text == data.decode()
    pretty = formatting.format_bytes(data, "json")
    assert pretty.shown_as == "json"
    assert pretty.text == json.dumps({"b": [1, 2], "a": "é"}, indent=2, ensure_ascii=False)
    hexed = formatting.format_bytes(b"\x00\x01ab", "hex")
    assert hexed.text == "00000000  00 01 61 62"


def test_bytes_that_are_not_utf8_fall_back_to_hex() -> None:
    for wanted in ("text", "json"):
        shown = formatting.format_bytes(b"\xff\xfe", wanted)  # type: ignore[arg-type]
        assert shown.shown_as == "hex"
        assert shown.text == "00000000  ff fe"
        assert "not UTF-8" in shown.note


def test_text_that_is_not_json_is_shown_as_text() -> None:
    shown = formatting.format_bytes(b"plain", "json")
    assert (shown.shown_as, shown.text) == ("text", "plain")
    assert formatting.format_bytes(None, "json").shown_as == "null"


def test_hex_dump_has_sixteen_bytes_a_line() -> None:
    lines = formatting.hex_dump(bytes(range(20))).splitlines()
    assert len(lines) == 2
    assert lines[1].startswith("00000010  10 11 12 13")


def test_timestamps_parse_from_milliseconds_or_iso() -> None:
    assert formatting.parse_timestamp("1700000000000") == 1_700_000_000_000
    assert formatting.parse_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert formatting.parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000
    assert formatting.format_timestamp_ms(1_700_000_000_000) == "2023-11-14T22:13:20.000Z"
    with pytest.raises(ValueError):
        formatting.parse_timestamp("yesterday")


def test_unknown_format_names_mean_text() -> None:
    assert formatting.parse_format("hex") == "hex"
    assert formatting.parse_format("<script>") == "text"
    assert formatting.parse_format(None) == "text"


def test_chart_is_valid_svg_with_axes_and_one_line_per_series() -> None:
    svg = charts.line_chart(
        [
            charts.Series("a<b>", [(0.0, 0.0), (2.0, 40.0), (4.0, 10.0)]),
            charts.Series("second", [(0.0, 5.0), (4.0, 5.0)]),
        ],
        title="Rate of <t>",
        y_label="records/s",
    )
    root = ElementTree.fromstring(str(svg))
    namespace = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{namespace}polyline")
    assert len(lines) == 2
    first = [tuple(map(float, p.split(","))) for p in lines[0].attrib["points"].split()]
    assert len(first) == 3
    # The peak (40) reaches the nice ceiling (50) at 80 % of the plot height.
    top = charts.MARGIN_TOP
    bottom = charts.HEIGHT - charts.MARGIN_BOTTOM
    assert first[1][1] == pytest.approx(bottom - 0.8 * (bottom - top), abs=0.1)
    assert first[0][1] == pytest.approx(bottom)
    texts = [t.text for t in root.iter(f"{namespace}text")]
    assert "Rate of <t>" in texts  # escaped in the markup, parsed back here
    assert "records/s" in texts and "50" in texts and "00:00:04 UTC" in texts
    assert "<b>" not in str(svg)
    points = root.findall(f"{namespace}circle")
    assert len(points) == 5  # one hover marker per point of both series
    title = points[1].find(f"{namespace}title")
    assert title is not None and title.text == "a<b>: 40 records/s at 00:00:02 UTC"
    assert points[1].attrib["data-label"] == title.text


def test_long_series_get_a_bounded_number_of_markers_the_newest_included() -> None:
    points = [(float(t), float(t)) for t in range(1000)]
    marked = charts.marked_points(points)
    assert len(marked) == charts.POINT_MARKERS_MAX
    assert marked[-1] == points[-1]
    assert marked == sorted(marked)
    svg = charts.line_chart([charts.Series("s", points)], title="t", y_label="y")
    assert str(svg).count("<circle") == charts.POINT_MARKERS_MAX


def test_chart_without_enough_points_says_so() -> None:
    svg = str(charts.line_chart([charts.Series("a", [(0.0, 1.0)])], title="t", y_label="y"))
    assert "no data yet" in svg
    ElementTree.fromstring(svg)


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 1), (0.3, 0.5), (1, 1), (7, 10), (12, 20), (4500, 5000)]
)
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert charts.nice_ceiling(value) == pytest.approx(ceiling)
