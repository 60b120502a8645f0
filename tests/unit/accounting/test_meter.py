"""The energy meter against figures worked out by hand: PUE, flat and hourly prices, carbon changes."""

from __future__ import annotations

import math

import pytest

from greengpu.accounting.meter import EnergyMeter
from greengpu.model import Site, TimeSeries


def test_a_flat_price_and_intensity_over_one_hour() -> None:
    meter = EnergyMeter(Site(pue=1.2, price_per_kwh=0.2, carbon_g_per_kwh=300.0))
    meter.add(0.0, 3600.0, gpu_power_w=500.0, host_power_w=500.0)
    assert (meter.gpu_energy_j, meter.host_energy_j) == (1.8e6, 1.8e6)
    assert meter.facility_energy_kwh == pytest.approx(1.2)  # 1 kW for an hour x PUE 1.2
    assert meter.gpu_energy_kwh == pytest.approx(0.5)  # before PUE
    assert meter.cost == pytest.approx(0.24) and meter.co2_g == pytest.approx(360.0)


def test_a_site_without_prices_costs_nothing_and_emits_nothing() -> None:
    meter = EnergyMeter(Site())
    meter.add(0.0, 3600.0, gpu_power_w=1000.0, host_power_w=0.0)
    assert meter.facility_energy_kwh == pytest.approx(1.0)
    assert (meter.cost, meter.co2_g) == (0.0, 0.0)
    assert (meter.price_per_kwh(0.0), meter.carbon_g_per_kwh(0.0)) == (0.0, 0.0)


def test_an_interval_is_split_where_price_or_carbon_changes() -> None:
    site = Site(pue=1.0, tariff=TimeSeries((0.0, 2700.0), (0.10, 0.50)),
                carbon=TimeSeries((0.0, 900.0, 1800.0), (100.0, 300.0, 200.0)))
    meter = EnergyMeter(site)
    meter.add(0.0, 3600.0, gpu_power_w=1000.0, host_power_w=0.0)  # 1 kWh, a quarter in each quarter hour
    assert meter.cost == pytest.approx(0.75 * 0.10 + 0.25 * 0.50)
    assert meter.co2_g == pytest.approx(0.25 * 100 + 0.25 * 300 + 0.5 * 200)
    assert meter.next_break_after(0.0) == 900.0
    assert meter.next_break_after(900.0) == 1800.0
    assert meter.next_break_after(2000.0) == 2700.0
    assert meter.next_break_after(2700.0) == math.inf
    assert meter.carbon_g_per_kwh(1000.0) == 300.0 and meter.price_per_kwh(3000.0) == 0.50


def test_totals_accumulate_over_calls_and_an_empty_interval_adds_nothing() -> None:
    site = Site(pue=1.5, tariff=TimeSeries((0.0, 3600.0), (0.10, 0.40)), carbon_g_per_kwh=200.0)
    meter = EnergyMeter(site)
    meter.add(1800.0, 5400.0, gpu_power_w=300.0, host_power_w=100.0)  # 600 W at the meter: 0.3 kWh per hour
    meter.add(7200.0, 7200.0, gpu_power_w=300.0, host_power_w=100.0)
    meter.add(9000.0, 8000.0, gpu_power_w=300.0, host_power_w=100.0)  # backwards: nothing
    meter.add(6000.0, 6600.0, gpu_power_w=300.0, host_power_w=100.0)  # 0.1 kWh at 0.40
    assert meter.gpu_energy_j == 300.0 * 4200 and meter.host_energy_j == 100.0 * 4200
    assert meter.cost == pytest.approx(0.3 * 0.10 + 0.3 * 0.40 + 0.1 * 0.40)
    assert meter.co2_g == pytest.approx(0.7 * 200)
