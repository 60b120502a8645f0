"""The month's bill (greengpu.accounting.bill) on a small hand-built ledger, every figure worked out by hand:
rows by job, tenant, node and class, idle kept or shared, the ledger's own rates when the report gives
no price or carbon source, job states, days and month totals."""

from __future__ import annotations

import pytest

from greengpu.accounting.bill import (
    HourFigures,
    JobSegment,
    MonthInput,
    Pricing,
    Row,
    make_bill,
    month_site_totals,
    segment_hours,
)
from greengpu.accounting.carbon import Contract, Embodied, FlatIntensity, MarketInstruments
from greengpu.accounting.tariffs import FlatRate

DAY_S = 86_400.0
# The report's PUE 1.2 against the run's 1.5: every facility figure of the ledger counts 0.8.
PUE = Pricing(run_pue=1.5, pue=1.2)


def hour(start_s: float, key: str, gpu_hours: float, gpu_kwh: float, kwh: float, cost: float, co2_kg: float
         ) -> HourFigures:
    return HourFigures(start_s, key, gpu_hours, gpu_kwh, kwh, cost, co2_kg)


# The site: 10, 20 and 5 kWh in three hours; the ledger's own rates 0.2, 0.3 and 0.2 per kWh, 100, 200
# and 100 g/kWh.
SITE = [hour(0.0, "", 4.0, 6.0, 10.0, 2.0, 1.0), hour(3600.0, "", 4.0, 12.0, 20.0, 6.0, 4.0),
        hour(DAY_S, "", 1.0, 2.0, 5.0, 1.0, 0.5)]
# j1: 2 GPUs from 00:30 to 01:30 (6 kWh, half in each hour); j2: 1 GPU for half an hour on day 2 over two nodes.
J1 = JobSegment("j1", "a", "train", 1800.0, 5400.0, 2.0, ("n1",), 3.0, 6.0, 99.0, 99.0)
J2 = JobSegment("j2", "b", "infer", DAY_S, DAY_S + 1800.0, 1.0, ("n1", "n2"), 1.0, 2.0, 0.4, 0.2)
NODES = [hour(0.0, "n1", 2.0, 5.0, 8.0, 1.6, 0.8), hour(DAY_S, "n1", 1.0, 1.5, 3.0, 0.6, 0.3),
         hour(DAY_S, "n2", 1.0, 0.5, 2.0, 0.4, 0.2), hour(3600.0, "n3", 0.0, 0.5, 5.0, 1.0, 0.5)]
TENANTS = [hour(0.0, "a", 1.0, 1.5, 3.0, 0.6, 0.3), hour(3600.0, "a", 1.0, 1.5, 3.0, 0.9, 0.6),
           hour(DAY_S, "b", 0.5, 1.0, 2.0, 0.4, 0.2)]


NO_CLOUD = {"cloud_node_hours": 0.0, "cloud_cost": 0.0, "cloud_co2_kg": 0.0}
"""Every row carries the cloud's figures, 0 in a month without any (the contract)."""


def month() -> MonthInput:
    return MonthInput(0.0, 2 * DAY_S, list(SITE), list(TENANTS), list(NODES), [J1, J2])


def figures(rows: list[Row], key: str) -> dict[str, float]:
    return {r.name: r.figures[key] for r in rows}


def test_job_rows_priced_at_the_ledgers_own_hourly_rates_with_idle_kept_apart() -> None:
    bill = make_bill(month(), PUE, "job", "none")
    # j1: 3 kWh in each hour, 2.4 at the report's PUE, at 0.2 and 0.3 per kWh, 100 and 200 g/kWh.
    assert [r.name for r in bill.rows] == ["j1", "j2"]
    assert bill.rows[0].figures == {"gpu_hours": 2.0, "gpu_hours_allocated": 2.0, "gpu_energy_kwh": 3.0,
                                    "energy_kwh": 4.8, "idle_energy_kwh": 0.0, "cost": 1.2, "co2_kg": 0.72, **NO_CLOUD}
    assert bill.rows[1].figures == {"gpu_hours": 0.5, "gpu_hours_allocated": 0.5, "gpu_energy_kwh": 1.0,
                                    "energy_kwh": 1.6, "idle_energy_kwh": 0.0, "cost": 0.32, "co2_kg": 0.16, **NO_CLOUD}
    assert bill.totals == {"gpu_hours": 9.0, "gpu_hours_allocated": 2.5, "gpu_energy_kwh": 20.0, "energy_kwh": 28.0,
                           "idle_energy_kwh": 21.6, "cost": 7.2, "co2_kg": 4.4, **NO_CLOUD}
    assert bill.idle == {"gpu_hours": 6.5, "gpu_hours_allocated": 0.0, "gpu_energy_kwh": 16.0, "energy_kwh": 21.6,
                         "idle_energy_kwh": 21.6, "cost": 5.68, "co2_kg": 3.52, **NO_CLOUD}
    assert bill.keys == ("gpu_hours", "gpu_hours_allocated", "gpu_energy_kwh", "energy_kwh", "idle_energy_kwh",
                         "cost", "co2_kg", "cloud_node_hours", "cloud_cost", "cloud_co2_kg")
    assert bill.aggregate == "job" and bill.share_idle == "none" and bill.market_factor_g_per_kwh is None
    # Days: 24 kWh on the first (4.8 charged to j1), 4 on the second (1.6 to j2).
    assert bill.days == [{"day_start_s": 0.0, "energy_kwh": 24.0, "cost": 6.4, "co2_kg": 4.0, "idle_share": 0.8},
                         {"day_start_s": DAY_S, "energy_kwh": 4.0, "cost": 0.8, "co2_kg": 0.4, "idle_share": 0.6}]
    assert bill.rows[0].jobs == {"ran": 1, "ended": 1, "preempted": 0, "running": 0}
    assert bill.rows[0].efficiency == 1.0 and bill.rows[0].idle_share == 0.0


def test_idle_shared_by_allocated_gpu_hours_or_evenly_conserves_every_figure() -> None:
    proportional = make_bill(month(), PUE, "job", "proportional")
    # 21.6 idle kWh by GPU-hours 2 : 0.5; cost 5.68 likewise: 5.744 and 1.456, rounded so they add to 7.20.
    assert figures(proportional.rows, "energy_kwh") == {"j1": 22.08, "j2": 5.92}
    assert figures(proportional.rows, "idle_energy_kwh") == {"j1": 17.28, "j2": 4.32}
    assert figures(proportional.rows, "cost") == {"j1": 5.74, "j2": 1.46}
    assert figures(proportional.rows, "gpu_hours_allocated") == {"j1": 2.0, "j2": 0.5}  # never shared
    assert figures(proportional.rows, "gpu_hours") == {"j1": 7.2, "j2": 1.8}
    assert proportional.idle == dict.fromkeys(proportional.keys, 0.0) and proportional.share_idle == "proportional"
    assert proportional.rows[0].idle_share == round(17.28 / 22.08, 4)
    even = make_bill(month(), PUE, "job", "even")
    assert figures(even.rows, "energy_kwh") == {"j1": 15.6, "j2": 12.4}
    assert figures(even.rows, "co2_kg") == {"j1": 2.48, "j2": 1.92}


def test_idle_is_shared_evenly_when_no_row_holds_gpu_hours_and_kept_when_there_is_no_row() -> None:
    data = month()
    data.tenant_hours = [hour(0.0, "a", 0.0, 0.0, 1.0, 0.1, 0.1), hour(0.0, "b", 0.0, 0.0, 3.0, 0.1, 0.1)]
    bill = make_bill(data, Pricing(run_pue=1.0), "tenant", "proportional")
    # 35 kWh, 4 charged: 31 idle in halves.
    assert figures(bill.rows, "energy_kwh") == {"a": 16.5, "b": 18.5}
    assert bill.rows[0].efficiency == 0.0  # billed the shared idle GPU-hours, allocated none
    data.tenant_hours = []
    alone = make_bill(data, Pricing(run_pue=1.0), "tenant", "proportional")
    assert alone.rows == [] and alone.idle["energy_kwh"] == 35.0 and alone.idle["idle_energy_kwh"] == 35.0


def test_tenant_rows_keep_the_ledgers_own_cost_at_the_reports_pue() -> None:
    bill = make_bill(month(), PUE, "tenant", "none")
    # Tenant rows are the ledger's own hours: cost and CO2 times 0.8, not re-priced at the site's average.
    assert figures(bill.rows, "cost") == {"a": 1.2, "b": 0.32}
    assert figures(bill.rows, "co2_kg") == {"a": 0.72, "b": 0.16}
    assert figures(bill.rows, "energy_kwh") == {"a": 4.8, "b": 1.6}
    assert bill.totals["idle_energy_kwh"] == 21.6
    assert [d["idle_share"] for d in bill.days] == [0.8, 0.6]


def test_node_rows_split_a_job_over_its_nodes_and_keep_idle_on_the_node() -> None:
    bill = make_bill(month(), PUE, "node", "proportional")
    assert bill.share_idle == "none"  # a node's idle is its own
    assert [r.name for r in bill.rows] == ["n1", "n2", "n3"]
    # n1: 11 kWh x 0.8 = 8.8, of which j1's 4.8 and half of j2's 1.6; n2 the other half; n3 ran nothing.
    assert figures(bill.rows, "energy_kwh") == {"n1": 8.8, "n2": 1.6, "n3": 4.0}
    assert figures(bill.rows, "gpu_hours_allocated") == {"n1": 2.25, "n2": 0.25, "n3": 0.0}
    assert figures(bill.rows, "idle_energy_kwh") == {"n1": 3.2, "n2": 0.8, "n3": 4.0}
    assert figures(bill.rows, "cost") == {"n1": 1.76, "n2": 0.32, "n3": 0.8}
    assert bill.totals["idle_energy_kwh"] == 8.0 and bill.idle["idle_energy_kwh"] == 0.0
    assert bill.idle["energy_kwh"] == 13.6 and bill.totals["gpu_hours_allocated"] == 2.5
    assert {r.name: r.jobs["ran"] for r in bill.rows} == {"n1": 2, "n2": 1, "n3": 0}
    assert bill.rows[2].jobs == {"ran": 0, "ended": 0, "preempted": 0, "running": 0}
    assert bill.rows[2].efficiency is None and bill.rows[2].idle_share == 1.0
    assert bill.days == [{"day_start_s": 0.0, "energy_kwh": 24.0, "cost": 6.4, "co2_kg": 4.0, "idle_share": 0.8},
                         {"day_start_s": DAY_S, "energy_kwh": 4.0, "cost": 0.8, "co2_kg": 0.4, "idle_share": 0.6}]


def test_a_report_tariff_carbon_market_and_embodied_figures_replace_the_ledgers() -> None:
    market = MarketInstruments(500.0, "residual", contracts=(Contract("ppa", 0.0, kwh_per_month=14.0),))
    pricing = Pricing(run_pue=1.5, pue=1.2, price=FlatRate(0.5, "flat"), carbon=FlatIntensity(300.0, "grid"),
                      market=market, embodied=Embodied(kg_per_gpu=876.0, lifetime_years=1.0, source="lca"))
    bill = make_bill(month(), pricing, "class", "none")
    # 28 kWh: 14 from the PPA at 0 g, 14 at 500 g: 7 kg, 250 g on every kWh.
    assert bill.market_factor_g_per_kwh == 250.0
    assert figures(bill.rows, "cost") == {"infer": 0.8, "train": 2.4}
    assert figures(bill.rows, "co2_kg") == {"infer": 0.48, "train": 1.44}
    assert figures(bill.rows, "co2_market_kg") == {"infer": 0.4, "train": 1.2}
    assert figures(bill.rows, "embodied_kg") == {"infer": 0.05, "train": 0.2}  # 0.1 kg per GPU-hour
    assert bill.totals["cost"] == 14.0 and bill.totals["co2_market_kg"] == 7.0 and bill.totals["embodied_kg"] == 0.9
    assert bill.keys[-5:-3] == ("embodied_kg", "co2_market_kg")
    assert bill.days[0]["cost"] == 12.0 and bill.days[0]["co2_kg"] == 7.2
    empty = make_bill(MonthInput(0.0, DAY_S, [], [], [], []), pricing, "tenant", "none")
    assert empty.market_factor_g_per_kwh == 500.0 and empty.totals["energy_kwh"] == 0.0 and empty.days == []


def test_segments_are_cut_at_hours_and_at_the_months_bounds() -> None:
    pieces = segment_hours(J1, 0.0, 4000.0, "k")
    assert pieces == [hour(0.0, "k", 1.0, 1.5, 3.0, 49.5, 49.5), HourFigures(3600.0, "k", 2.0 * 400 / 3600,
                      3.0 * 400 / 3600, 6.0 * 400 / 3600, 99.0 * 400 / 3600, 99.0 * 400 / 3600)]
    assert segment_hours(J1, 2700.0, 9000.0, "k")[0] == hour(0.0, "k", 0.5, 0.75, 1.5, 24.75, 24.75)
    instant = JobSegment("z", "a", "train", 100.0, 100.0, 1.0, ("n1",), 1.0, 1.0, 1.0, 1.0)
    assert segment_hours(instant, 0.0, 3600.0, "k") == [] and segment_hours(J1, 6000.0, 9000.0, "k") == []


def test_job_states_count_runs_ends_preemptions_and_jobs_still_running() -> None:
    def seg(job_id: str, start_s: float, end_s: float, job_class: str = "train") -> JobSegment:
        return JobSegment(job_id, "a", job_class, start_s, end_s, 1.0, ("n1",), 0.0, 0.0, 0.0, 0.0)

    segments = [seg("cont", 100.0, 1000.0), seg("cont", 1000.0, 2000.0),  # a pace change, not a stop
                seg("pre", 100.0, 500.0), seg("pre", 900.0, 1500.0), seg("pre", 2000.0, 5000.0),
                seg("run", 3000.0, 3600.0), seg("before", -50.0, 0.0), seg("after", 3600.0, 4000.0),
                seg("edge", 0.0, 3600.0, "other")]
    data = MonthInput(0.0, 3600.0, [hour(0.0, "", 1.0, 1.0, 1.0, 1.0, 1.0)], [], [], segments)
    bill = make_bill(data, Pricing(run_pue=1.0), "class", "none")
    # cont ended once; pre was stopped twice (counted once) and runs on past the month; run reaches its end.
    assert {r.name: r.jobs for r in bill.rows} == {
        "other": {"ran": 1, "ended": 0, "preempted": 0, "running": 1},
        "train": {"ran": 3, "ended": 1, "preempted": 1, "running": 2}}


def test_month_totals_per_calendar_month_priced_like_the_bill() -> None:
    market = MarketInstruments(500.0, "residual", contracts=(Contract("ppa", 0.0, kwh_per_month=14.0),))
    months = [("m1", 0.0, DAY_S), ("m2", DAY_S, 2 * DAY_S), ("m3", 2 * DAY_S, 3 * DAY_S)]
    assert month_site_totals(SITE, PUE, months) == [
        {"period": "m1", "gpu_hours": 8.0, "energy_kwh": 24.0, "cost": 6.4, "co2_kg": 4.0},
        {"period": "m2", "gpu_hours": 1.0, "energy_kwh": 4.0, "cost": 0.8, "co2_kg": 0.4}]
    with_market = month_site_totals(SITE, Pricing(run_pue=1.0, market=market), months[:1])
    assert with_market == [{"period": "m1", "gpu_hours": 8.0, "energy_kwh": 30.0, "cost": 8.0, "co2_kg": 5.0,
                            "co2_market_kg": 8.0}]


@pytest.mark.parametrize(("pue", "factor"), [(None, 1.0), (1.5, 1.0), (3.0, 2.0)])
def test_the_reports_pue_scales_the_ledgers_facility_energy(pue: float | None, factor: float) -> None:
    assert Pricing(run_pue=1.5, pue=pue).pue_factor == factor


def test_the_ledgers_own_rate_of_an_hour_adds_every_site_row_and_skips_hours_without_energy() -> None:
    # Hour 0 has two site rows (10 kWh at 2, 30 kWh at 10): 0.3 per kWh, 275 g/kWh. Hour 1 has 0.5 kWh at 0.5;
    # hour 2 none at all: a job there keeps its own cost.
    site = [hour(0.0, "", 1.0, 1.0, 10.0, 2.0, 1.0), hour(0.0, "", 1.0, 1.0, 30.0, 10.0, 10.0),
            hour(3600.0, "", 1.0, 1.0, 0.5, 0.5, 0.05), hour(7200.0, "", 0.0, 0.0, 0.0, 0.0, 0.0)]
    segment = JobSegment("j", "a", "train", 0.0, 3 * 3600.0, 1.0, ("n1",), 3.0, 3.0, 0.9, 0.6)
    bill = make_bill(MonthInput(0.0, DAY_S, site, [], [], [segment]), Pricing(run_pue=1.0), "job", "none")
    # 1 kWh an hour: 0.3 + 1.0 + 0.3 (own: 0.9 / 3); CO2 0.275 + 0.1 + 0.2.
    assert bill.rows[0].figures["cost"] == 1.6 and bill.rows[0].figures["co2_kg"] == 0.575


def test_job_states_count_every_job_that_ended_or_was_preempted_even_given_out_of_order() -> None:
    def seg(job_id: str, start_s: float, end_s: float) -> JobSegment:
        return JobSegment(job_id, "a", "train", start_s, end_s, 1.0, ("n1",), 0.0, 0.0, 0.0, 0.0)

    segments = [seg("late", 2000.0, 2500.0), seg("late", 100.0, 200.0), seg("done", 0.0, 100.0),
                seg("also", 300.0, 400.0), seg("p2", 0.0, 50.0), seg("p2", 60.0, 4000.0)]
    data = MonthInput(0.0, 3600.0, [hour(0.0, "", 1.0, 1.0, 1.0, 1.0, 1.0)], [], [], segments)
    jobs = make_bill(data, Pricing(run_pue=1.0), "class", "none").rows[0].jobs
    # late: stopped at 200, ended at 2500 (its last end, though listed first); p2 stopped at 50, runs on.
    assert jobs == {"ran": 4, "ended": 3, "preempted": 2, "running": 1}


def test_idle_is_shared_by_gpu_hours_even_when_they_add_up_to_less_than_one() -> None:
    data = month()
    data.tenant_hours = [hour(0.0, "a", 0.5, 0.0, 1.0, 0.1, 0.1), hour(0.0, "b", 0.25, 0.0, 1.0, 0.1, 0.1)]
    bill = make_bill(data, Pricing(run_pue=1.0), "tenant", "proportional")
    # 35 kWh, 2 charged: 33 idle by 0.5 : 0.25.
    assert figures(bill.rows, "energy_kwh") == {"a": 23.0, "b": 12.0}


def test_days_month_totals_and_the_market_factor_are_rounded_to_their_units() -> None:
    # One hour of 1.234567 kWh costing 0.123456 and emitting 0.1234567 kg; a job charged a third of it.
    site = [hour(0.0, "", 1.234567, 0.0, 1.234567, 0.123456, 0.1234567)]
    segment = JobSegment("j", "a", "train", 0.0, 1200.0, 1.0, ("n1",), 0.0, 1.234567 / 3, 0.0, 0.0)
    market = MarketInstruments(500.0, "residual", contracts=(Contract("ppa", 0.0, kwh_per_month=0.5),))
    bill = make_bill(MonthInput(0.0, DAY_S, site, [], [], [segment]), Pricing(run_pue=1.0, market=market), "job",
                     "none")
    assert bill.days == [{"day_start_s": 0.0, "energy_kwh": 1.235, "cost": 0.12, "co2_kg": 0.123,
                          "idle_share": 0.6667}]
    # 0.734567 of 1.234567 kWh at 500 g: 297.5 g/kWh to three decimals.
    assert bill.market_factor_g_per_kwh == round(0.734567 * 500 / 1.234567, 3) == 297.5
    months = month_site_totals(site, Pricing(run_pue=1.0, market=market), [("before", -DAY_S, 0.0),
                                                                           ("m", 0.0, DAY_S)])
    assert months == [{"period": "m", "gpu_hours": 1.235, "energy_kwh": 1.235, "cost": 0.12, "co2_kg": 0.123,
                       "co2_market_kg": 0.367}]


def test_a_day_without_charged_energy_or_without_energy() -> None:
    site = [hour(0.0, "", 1.0, 0.0, 0.5, 0.1, 0.1), hour(DAY_S, "", 1.0, 0.0, 2.0, 0.1, 0.1),
            hour(2 * DAY_S, "", 0.0, 0.0, 0.0, 0.0, 0.0)]
    segment = JobSegment("j", "a", "train", 0.0, 3600.0, 1.0, ("n1",), 0.0, 0.25, 0.0, 0.0)
    market = MarketInstruments(500.0, "residual", contracts=(Contract("ppa", 0.0, kwh_per_month=2.0),))
    bill = make_bill(MonthInput(0.0, 3 * DAY_S, site, [], [], [segment]), Pricing(run_pue=1.0, market=market),
                     "job", "none")
    assert [d["idle_share"] for d in bill.days] == [0.5, 1.0, 0.0]
    assert bill.market_factor_g_per_kwh == 100.0  # 2.5 kWh, 2 of them under contract: 0.5 x 500 / 2.5
    small = make_bill(MonthInput(0.0, DAY_S, site[:1], [], [], []), Pricing(run_pue=1.0, market=market), "job",
                      "none")
    assert small.market_factor_g_per_kwh == 0.0  # 0.5 kWh, all under contract
    empty = make_bill(MonthInput(0.0, DAY_S, [], [], [], []), Pricing(run_pue=1.0, market=market), "job", "none")
    assert empty.totals["co2_market_kg"] == 0.0
