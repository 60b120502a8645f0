"""Hand-computed tariff and carbon arithmetic of a monthly bill: the OpenEI time-of-use rate and its period
boundaries, a daylight-saving change, holidays, hourly price and carbon series, market-based factors,
PUE and embodied emissions."""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

import pytest
from conftest import public_data

from greengpu.accounting.bill import HourFigures, MonthInput, Pricing, make_bill
from greengpu.accounting.carbon import (
    Contract,
    Embodied,
    FlatIntensity,
    HourlyIntensity,
    MarketInstruments,
    market_co2_kg,
    market_parts,
)
from greengpu.accounting.tariffs import HourlyRate, TariffDocumentError, parse_openei
from greengpu.config.series import read_series_csv

VIRGINIA = "openei-urdb/openei_urdb_virginia.json"
ADJ = 0.03255
OFF_PEAK, SHOULDER, PEAK = 0.01679 + ADJ, 0.04944 + ADJ, 0.14284 + ADJ


def utc(text: str) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


def virginia(**kwargs: object):  # type: ignore[no-untyped-def]
    document = json.loads(public_data(VIRGINIA).read_text())
    return parse_openei(document, timezone="America/New_York", source="test", **kwargs)  # type: ignore[arg-type]


def test_openei_virginia_periods_are_read_with_their_adjustment() -> None:
    tariff = virginia()
    assert tariff.period_rates == pytest.approx((OFF_PEAK, SHOULDER, PEAK))
    assert tariff.fixed_charge_per_month == 2.9
    assert "Virginia Electric & Power Co" in tariff.source


def test_time_of_use_boundary_in_local_time() -> None:
    tariff = virginia()
    # Tuesday 2017-10-10, EDT (UTC-4): local 04:00 is off-peak (period 0), 05:00 shoulder, 06:00 peak,
    # 21:00 peak, 22:00 shoulder.
    assert tariff.price_per_kwh(utc("2017-10-10T08:00:00")) == pytest.approx(OFF_PEAK)
    assert tariff.price_per_kwh(utc("2017-10-10T09:00:00")) == pytest.approx(SHOULDER)
    assert tariff.price_per_kwh(utc("2017-10-10T10:00:00")) == pytest.approx(PEAK)
    assert tariff.price_per_kwh(utc("2017-10-11T01:00:00")) == pytest.approx(PEAK)  # local 21:00
    assert tariff.price_per_kwh(utc("2017-10-11T02:00:00")) == pytest.approx(SHOULDER)  # local 22:00


def test_daylight_saving_change_moves_the_periods_by_an_hour_in_utc() -> None:
    tariff = virginia()
    # Peak starts at local 06:00: 10:00 UTC in EDT (before 2017-11-05), 11:00 UTC in EST (after).
    assert tariff.price_per_kwh(utc("2017-11-03T10:00:00")) == pytest.approx(PEAK)
    assert tariff.price_per_kwh(utc("2017-11-06T10:00:00")) == pytest.approx(SHOULDER)
    assert tariff.price_per_kwh(utc("2017-11-06T11:00:00")) == pytest.approx(PEAK)
    # The night of the change: local 01:00 happens twice (05:00 and 06:00 UTC), both off-peak; local 00:00 is
    # shoulder (04:00 UTC).
    assert [tariff.period_at(utc(f"2017-11-05T0{h}:00:00")) for h in range(4, 8)] == [1, 0, 0, 0]
    # A day of 1 kWh every hour: 25 local hours on the day the clocks go back (the extra one off-peak).
    hours = [utc("2017-11-05T04:00:00") + 3600 * k for k in range(25)]
    assert sum(tariff.price_per_kwh(h) for h in hours) == pytest.approx(5 * OFF_PEAK + 4 * SHOULDER + 16 * PEAK)


def test_holidays_take_the_weekend_schedule() -> None:
    document = json.loads(public_data(VIRGINIA).read_text())
    item = document["items"][0]
    item["energyweekendschedule"] = [[0] * 24 for _ in range(12)]  # weekends all off-peak
    tariff = parse_openei(document, timezone="America/New_York", source="t", holidays=[dt.date(2017, 11, 23)])
    noon = {day: utc(f"2017-11-{day}T17:00:00") for day in (22, 23, 25)}  # Wed, Thanksgiving Thu, Sat
    assert [tariff.price_per_kwh(noon[d]) for d in (22, 23, 25)] == pytest.approx([PEAK, OFF_PEAK, OFF_PEAK])


@pytest.mark.parametrize(("change", "key"), [
    (lambda i: i.__setitem__("energyratestructure", [[{"rate": 0.1, "max": 500}, {"rate": 0.2}]]),
     "energyratestructure[0]"),
    (lambda i: i["energyweekdayschedule"][3].__setitem__(7, 5), "energyweekdayschedule[3][7]"),
    (lambda i: i["energyweekendschedule"].pop(), "energyweekendschedule"),
    (lambda i: i["energyratestructure"][1][0].__setitem__("rate", "NaN"), "energyratestructure[1][0].rate"),
    (lambda i: i["energyratestructure"][0][0].__setitem__("unit", "kW"), "energyratestructure[0][0].unit"),
])
def test_openei_documents_it_cannot_use_name_the_key(change, key: str) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(public_data(VIRGINIA).read_text())
    change(document["items"][0])
    with pytest.raises(TariffDocumentError) as caught:
        parse_openei(document, timezone="America/New_York", source="t")
    assert caught.value.key == key


def test_market_based_factor_by_hand() -> None:
    market = MarketInstruments(residual_g_per_kwh=500.0, source="residual mix", contracts=(
        Contract("wind PPA", 0.0, kwh_per_month=300.0), Contract("supplier green tariff", 100.0, share=0.2)),
        certificates_kwh_per_month=200.0)
    # 1,000 kWh: the PPA covers 300 at 0, the green tariff 20% of 1,000 = 200 at 100 g, certificates 200 at 0,
    # the remaining 300 at the residual 500 g: 20 + 150 = 170 kg.
    parts = market_parts(1000.0, market)
    assert [(p.instrument, p.energy_kwh) for p in parts] == [("wind PPA", 300.0), ("supplier green tariff", 200.0),
                                                             ("energy attribute certificates", 200.0),
                                                             ("residual mix", 300.0)]
    assert market_co2_kg(1000.0, market) == pytest.approx(170.0)
    # 400 kWh: the PPA 300, the tariff the 80 kWh share (20% of 400), certificates the last 20, residual none.
    assert market_co2_kg(400.0, market) == pytest.approx(80 * 0.1)


def _one_hour(hour_s: float, tenant_kwh: float, site_kwh: float) -> MonthInput:
    return MonthInput(start_s=hour_s, end_s=hour_s + 3600,
                      site_hours=[HourFigures(hour_s, "", 8.0, site_kwh / 2, site_kwh, 0.0, 0.0)],
                      tenant_hours=[HourFigures(hour_s, "lab", 2.0, tenant_kwh / 2, tenant_kwh, 0.0, 0.0)],
                      node_hours=[HourFigures(hour_s, "n1", 8.0, site_kwh / 2, site_kwh, 0.0, 0.0)], segments=[])


def test_bill_of_one_hour_by_hand_location_market_pue_embodied() -> None:
    hour = utc("2017-10-10T10:00:00")  # a peak hour
    market = MarketInstruments(residual_g_per_kwh=600.0, source="r", certificates_kwh_per_month=7.0)
    pricing = Pricing(run_pue=1.4, price=virginia(), carbon=FlatIntensity(400.0, "grid"), pue=1.2, market=market,
                      embodied=Embodied(kg_per_gpu=1752.0, lifetime_years=4.0, source="vendor LCA"))
    bill = make_bill(_one_hour(hour, tenant_kwh=7.0, site_kwh=14.0), pricing, "tenant", "none")
    # PUE 1.2 instead of the ledger's 1.4: the site's 14 kWh are 12; the tenant's 7 are 6.
    (row,) = bill.rows
    assert bill.totals["energy_kwh"] == 12.0 and row.figures["energy_kwh"] == 6.0
    assert row.figures["cost"] == round(6.0 * PEAK, 2)
    assert row.figures["co2_kg"] == 2.4 and bill.totals["co2_kg"] == 4.8
    # Market: 7 of the 12 kWh certified, 5 at 600 g = 3 kg over the month, 0.25 kg/kWh on every kWh.
    assert bill.market_factor_g_per_kwh == 250.0
    assert row.figures["co2_market_kg"] == 1.5 and bill.idle["co2_market_kg"] == 1.5
    # Embodied: 1,752 kg over 4 years of 8,760 h is 0.05 kg per GPU-hour; the tenant held 2, the site 8.
    assert row.figures["embodied_kg"] == 0.1 and bill.totals["embodied_kg"] == 0.4
    assert bill.idle["embodied_kg"] == 0.3


def test_idle_sharing_by_hand() -> None:
    hour = utc("2017-10-10T10:00:00")
    data = _one_hour(hour, tenant_kwh=3.0, site_kwh=12.0)
    data.tenant_hours.append(HourFigures(hour, "zoo", 1.0, 0.5, 1.0, 0.0, 0.0))
    pricing = Pricing(run_pue=1.0, carbon=FlatIntensity(1000.0, "g"), price=HourlyRate(
        read_series_csv(public_data("pjm-2021-hourly/prices_2021-10_2021-11.csv"), "price_per_kwh",
                        allow_negative=True, shown_name="p"), "p"))
    # Idle: 12 - 3 - 1 = 8 kWh. Proportional to GPU-hours (2 and 1): 16/3 and 8/3; even: 4 and 4.
    proportional = {r.name: r.figures["energy_kwh"] for r in make_bill(data, pricing, "tenant", "proportional").rows}
    assert proportional == {"lab": round(3 + 16 / 3, 3), "zoo": round(1 + 8 / 3, 3)}
    even = make_bill(data, pricing, "tenant", "even")
    assert {r.name: r.figures["energy_kwh"] for r in even.rows} == {"lab": 7.0, "zoo": 5.0}
    assert {r.name: r.idle_share for r in even.rows} == {"lab": round(4 / 7, 4), "zoo": 0.8}
    assert even.idle["energy_kwh"] == 0.0 and even.totals["co2_kg"] == 12.0


def test_hourly_price_and_carbon_slices_priced_hour_by_hour() -> None:
    """A day of PJM prices and carbon (October 2021): the bill is the sum of each hour's kWh at that hour's
    price and intensity, read here independently from the shipped CSVs."""
    price_path = public_data("pjm-2021-hourly/prices_2021-10_2021-11.csv")
    carbon_path = public_data("pjm-2021-hourly/carbon_2021-10_2021-11.csv")
    with price_path.open() as handle:
        prices = {row["time"]: float(row["price_per_kwh"]) for row in csv.DictReader(handle)}
    with carbon_path.open() as handle:
        carbon = {row["time"]: float(row["g_per_kwh"]) for row in csv.DictReader(handle)}
    start = utc("2021-10-05T00:00:00")
    hours = [start + 3600 * k for k in range(24)]
    site = [HourFigures(h, "", 8.0, 1.0, 2.0 + k % 5, 0.0, 0.0) for k, h in enumerate(hours)]
    data = MonthInput(start_s=start, end_s=start + 86400, site_hours=site, tenant_hours=[], node_hours=[],
                      segments=[])
    pricing = Pricing(run_pue=1.0, price=HourlyRate(read_series_csv(price_path, "price_per_kwh", allow_negative=True,
                                                                    shown_name="p"), "p"),
                      carbon=HourlyIntensity(read_series_csv(carbon_path, "g_per_kwh", allow_negative=False,
                                                             shown_name="c"), "c"))
    bill = make_bill(data, pricing, "tenant", "none")

    def stamp(h: float) -> str:
        return dt.datetime.fromtimestamp(h, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    assert bill.totals["cost"] == round(sum((2.0 + k % 5) * prices[stamp(h)] for k, h in enumerate(hours)), 2)
    assert bill.totals["co2_kg"] == round(sum((2.0 + k % 5) * carbon[stamp(h)] / 1000 for k, h in enumerate(hours)), 3)
    assert bill.idle["cost"] == bill.totals["cost"]  # no tenant rows: all idle


def test_openei_read_through_settings_names_the_file(tmp_path: Path) -> None:
    from greengpu.errors import ConfigError
    from greengpu.report.settings import read_settings

    document = json.loads(public_data(VIRGINIA).read_text())
    document["items"][0]["energyweekdayschedule"][0][0] = 9
    (tmp_path / "rate.json").write_text(json.dumps(document))
    (tmp_path / "s.yaml").write_text("tariff:\n  openei: rate.json\n  timezone: America/New_York\n")
    with pytest.raises(ConfigError, match=r"rate.json: energyweekdayschedule\[0\]\[0\]: period '9' is not one"):
        read_settings(str(tmp_path / "s.yaml"))
    (tmp_path / "rate.json").write_text(public_data(VIRGINIA).read_text())
    (tmp_path / "s.yaml").write_text("tariff:\n  openei: rate.json\n  timezone: Mars/Olympus\n")
    with pytest.raises(ConfigError, match=r"s.yaml:3: tariff.timezone: unknown time zone"):
        read_settings(str(tmp_path / "s.yaml"))
