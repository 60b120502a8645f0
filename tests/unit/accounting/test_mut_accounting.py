"""Accounting inputs and splits at their edges: every way an OpenEI rate document is refused names the
field and says what is wrong (the report prints both), the defaults a rate may leave out, the month a
time-of-use period is read from, contracts without an amount and energy under one kWh, and a job
segment cut at hours."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest

from greengpu.accounting.bill import JobSegment, segment_hours
from greengpu.accounting.carbon import Contract, MarketInstruments, market_parts
from greengpu.accounting.rounding import as_decimal, decimals_of
from greengpu.accounting.tariffs import TariffDocumentError, parse_openei

HOUR_S = 3600.0


def rate_document(**overrides: Any) -> dict[str, Any]:
    """Two periods: 0 at night and 1 by day on weekdays, 0 all weekend."""
    document: dict[str, Any] = {
        "utility": "Acme Power", "name": "TOU-1",
        "energyratestructure": [[{"rate": 0.10, "unit": "kWh"}], [{"rate": 0.20, "adj": 0.01}]],
        "energyweekdayschedule": [[0] * 8 + [1] * 12 + [0] * 4 for _ in range(12)],
        "energyweekendschedule": [[0] * 24 for _ in range(12)],
    }
    document.update(overrides)
    return {key: value for key, value in document.items() if value is not None}


def refusal(document: Any, timezone: str = "UTC") -> tuple[str, str]:
    with pytest.raises(TariffDocumentError) as caught:
        parse_openei(document, timezone=timezone, source="rates.json")
    return caught.value.key, str(caught.value)


def test_a_rate_with_its_defaults_left_out() -> None:
    # No unit (kWh), no adjustment (0), no fixed charge (0), no fixed-charge units ($/month).
    tariff = parse_openei(rate_document(), timezone="UTC", source="rates.json")
    assert tariff.period_rates == pytest.approx((0.10, 0.21))
    assert tariff.fixed_charge_per_month == 0.0
    assert tariff.source == "rates.json: Acme Power TOU-1"
    fixed = parse_openei(rate_document(fixedchargefirstmeter=12.5), timezone="UTC", source="rates.json")
    assert fixed.fixed_charge_per_month == 12.5
    wrapped = parse_openei({"items": [rate_document()]}, timezone="UTC", source="rates.json")
    assert wrapped.period_rates == tariff.period_rates


def test_the_label_is_the_source_with_whatever_names_the_rate() -> None:
    assert parse_openei(rate_document(utility=None, name=None), timezone="UTC", source="r").source == "r"
    assert parse_openei(rate_document(name=None), timezone="UTC", source="r").source == "r: Acme Power"
    assert parse_openei(rate_document(utility=None), timezone="UTC", source="r").source == "r: TOU-1"


def test_the_period_is_read_from_the_local_month() -> None:
    # Odd months (January, March, ...) price every hour at period 1, even months at period 0.
    schedule = [[month % 2 == 0 and 1 or 0] * 24 for month in range(12)]
    tariff = parse_openei(rate_document(energyweekdayschedule=schedule, energyweekendschedule=schedule),
                          timezone="UTC", source="r")
    january = dt.datetime(2026, 1, 14, 12, tzinfo=dt.UTC).timestamp()
    february = dt.datetime(2026, 2, 11, 12, tzinfo=dt.UTC).timestamp()
    assert (tariff.period_at(january), tariff.period_at(february)) == (1, 0)


LONG = "x" * 50


@pytest.mark.parametrize(("document", "key", "message"), [
    ({"items": []}, "items", "no rate in the document"),
    ({"items": "rate"}, "items", "no rate in the document"),
    ({"items": [rate_document(), rate_document()]}, "items", "2 rates in the document; keep the one that applies"),
    ({"items": [5]}, "items[0]", "expected a rate object"),
    ("a page about items", "items[0]", "expected a rate object"),
    (rate_document(energyratestructure=None), "energyratestructure", "missing: this rate has no energy charges"),
    (rate_document(energyratestructure=[]), "energyratestructure", "missing: this rate has no energy charges"),
    (rate_document(energyratestructure=[[]]), "energyratestructure[0]", "expected a list of tiers"),
    (rate_document(energyratestructure=[[{"rate": 0.1}], [5]]), "energyratestructure[1]", "expected a list of tiers"),
    (rate_document(energyratestructure=[[{"rate": 0.1}, {"rate": 0.2}]]), "energyratestructure[0]",
     "2 consumption tiers; tiered rates are not supported"),
    (rate_document(energyratestructure=[[{"rate": 0.1, "unit": "MWh"}]]), "energyratestructure[0][0].unit",
     "unit 'MWh'; only kWh rates are supported"),
    (rate_document(energyratestructure=[[{"rate": 0.1, "unit": LONG}]]), "energyratestructure[0][0].unit",
     f"unit {'x' * 20!r}; only kWh rates are supported"),
    (rate_document(energyratestructure=[[{"rate": 0.1}], [{"rate": 0.2, "adj": "x"}]]),
     "energyratestructure[1][0].adj", "expected a price per kWh, got 'x'"),
    (rate_document(energyratestructure=[[{"rate": LONG}]]), "energyratestructure[0][0].rate",
     f"expected a price per kWh, got {'x' * 30!r}"),
    (rate_document(energyratestructure=[[{"rate": math.nan}]]), "energyratestructure[0][0].rate",
     "expected a price per kWh, got 'nan'"),
    (rate_document(energyratestructure=[[{"rate": 1000000.5}]]), "energyratestructure[0][0].rate",
     "expected a price per kWh, got '1000000.5'"),
    (rate_document(energyweekdayschedule=[[0] * 24] * 11), "energyweekdayschedule",
     "expected 12 months of 24 period indices"),
    (rate_document(energyweekdayschedule=[[0] * 24] * 3 + [[0] * 23] + [[0] * 24] * 8), "energyweekdayschedule[3]",
     "expected 24 period indices, one per hour"),
    (rate_document(energyweekendschedule=[[0] * 5 + [2] + [0] * 18] + [[0] * 24] * 11),
     "energyweekendschedule[0][5]", "period '2' is not one of the 2 rate periods"),
    (rate_document(energyweekendschedule=[[LONG] * 24] * 12), "energyweekendschedule[0][0]",
     f"period {'x' * 20!r} is not one of the 2 rate periods"),
    (rate_document(fixedchargefirstmeter=5.0, fixedchargeunits="$/day"), "fixedchargeunits",
     "'$/day'; only $/month is supported"),
    (rate_document(fixedchargefirstmeter=5.0, fixedchargeunits=LONG), "fixedchargeunits",
     f"{'x' * 20!r}; only $/month is supported"),
    (rate_document(fixedchargefirstmeter="five"), "fixedchargefirstmeter", "expected a price per kWh, got 'five'"),
])
def test_a_refused_document_names_the_field_and_the_fault(document: Any, key: str, message: str) -> None:
    assert refusal(document) == (key, message)


def test_the_largest_price_accepted_is_a_million() -> None:
    tariff = parse_openei(rate_document(energyratestructure=[[{"rate": 1e6}], [{"rate": -1e6}]]),
                          timezone="UTC", source="r")
    assert tariff.period_rates == (1e6, -1e6)


def test_an_unknown_time_zone_is_named_cut_to_forty_characters() -> None:
    zone = "Mars/" + "y" * 60
    assert refusal(rate_document(), timezone=zone) == ("timezone", f"unknown time zone {zone[:40]!r}")


def test_contracts_cover_what_they_offer_and_no_more() -> None:
    instruments = MarketInstruments(400.0, "grid", contracts=(Contract("nothing offered", 10.0),
                                                              Contract("half", 20.0, share=0.5)))
    parts = market_parts(0.4, instruments)
    assert [(p.instrument, p.energy_kwh) for p in parts] == [
        ("nothing offered", 0.0), ("half", pytest.approx(0.2)), ("energy attribute certificates", 0.0),
        ("residual mix", pytest.approx(0.2))]
    alone = market_parts(0.5, MarketInstruments(400.0, "grid"))
    assert [(p.instrument, p.energy_kwh) for p in alone] == [("energy attribute certificates", 0.0),
                                                             ("residual mix", 0.5)]


def segment(start_s: float, end_s: float) -> JobSegment:
    return JobSegment("j", "t", "training", start_s, end_s, 2.0, ("n1",), gpu_energy_kwh=3.0, energy_kwh=4.0,
                      cost=6.0, co2_kg=9.0)


def test_a_segment_is_cut_at_hours_each_piece_with_its_share_of_every_figure() -> None:
    # 1800 s to 5400 s: half an hour in hour 0, half in hour 1.
    pieces = segment_hours(segment(1800.0, 5400.0), 0.0, 4 * HOUR_S, "t")
    assert [(p.hour_start_s, p.gpu_hours) for p in pieces] == [(0.0, 1.0), (HOUR_S, 1.0)]
    assert [(p.gpu_energy_kwh, p.energy_kwh, p.cost, p.co2_kg) for p in pieces] == [(1.5, 2.0, 3.0, 4.5)] * 2


def test_a_one_second_segment_still_counts() -> None:
    (piece,) = segment_hours(segment(HOUR_S + 10.0, HOUR_S + 11.0), 0.0, 4 * HOUR_S, "t")
    assert piece.hour_start_s == HOUR_S and piece.cost == 6.0 and piece.gpu_hours == pytest.approx(2.0 / HOUR_S)


def test_decimal_places_of_a_unit() -> None:
    assert [decimals_of(u) for u in (1.0, 10.0, 0.1, 0.01, 0.001, 0.5)] == [0, 0, 1, 2, 3, 1]
    assert as_decimal(7, 0.01) == 0.07 and as_decimal(7, 1.0) == 7.0
