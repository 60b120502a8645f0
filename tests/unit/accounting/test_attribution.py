"""Energy, cost and CO2 split by job, tenant, node and hour, against figures worked out by hand.

Site: PUE 1.5, a tariff of 0.10 per kWh in the first hour and 0.40 from the second, 200 g CO2 per kWh.
One node of 2 GPUs whose host idles at 200 W.
"""

from __future__ import annotations

import pytest

from greengpu.accounting.attribution import Attribution, JobCharge, Usage
from greengpu.accounting.meter import EnergyMeter
from greengpu.model import Job, Site, TimeSeries

SITE = Site(pue=1.5, tariff=TimeSeries((0.0, 3600.0), (0.10, 0.40)), carbon_g_per_kwh=200.0)


def attribution() -> Attribution:
    return Attribution(EnergyMeter(SITE))


def run(books: Attribution, job_id: str, tenant: str, units: int, start_s: float, end_s: float) -> JobCharge:
    job = Job(job_id=job_id, tenant=tenant, gpus=units / 1000, duration_s=end_s - start_s, job_class="batch")
    return books.job_ran(job, {"n0": units}, start_s, end_s, gpu_busy_w_by_node={"n0": 300.0},
                         host_w_by_node={"n0": 200.0}, gpus_by_node={"n0": 2})


def test_a_job_is_charged_its_gpus_busy_power_and_its_share_of_the_host_hour_by_hour() -> None:
    books = attribution()
    # One whole GPU of two from 0:30 to 1:30: 300 W of GPU + 100 W of host, x 1.5 = 600 W at the meter,
    # 0.3 kWh in each hour: 0.3 x 0.10 + 0.3 x 0.40 = 0.15; 0.6 kWh x 200 g = 120 g.
    charge = run(books, "j1", "a", 1000, 1800.0, 5400.0)
    assert charge == JobCharge("j1", "a", "batch", 1800.0, 5400.0, 1.0, ("n0",), gpu_energy_j=300.0 * 3600,
                               facility_energy_j=pytest.approx(600.0 * 3600), cost=pytest.approx(0.15),
                               co2_g=pytest.approx(120.0), submit_s=0.0)  # the job's submit time, for queue rows
    assert sorted(books.tenant_hours) == [(0.0, "a"), (3600.0, "a")]
    first, second = books.tenant_hours[(0.0, "a")], books.tenant_hours[(3600.0, "a")]
    assert (first.gpu_hours, first.gpu_energy_j, first.facility_energy_j) == (0.5, 300.0 * 1800, 600.0 * 1800)
    assert first.cost == pytest.approx(0.03) and second.cost == pytest.approx(0.12)
    assert first.co2_g == pytest.approx(60.0) and second.co2_g == pytest.approx(60.0)
    assert books.jobs == [charge]


def test_a_shared_gpu_is_charged_by_its_share() -> None:
    books = attribution()
    # Half a GPU for the first hour: 150 W of GPU + 50 W of host (half of one GPU's half of the host).
    charge = run(books, "f", "b", 500, 0.0, 3600.0)
    assert charge.gpus == 0.5 and charge.gpu_energy_j == 150.0 * 3600
    assert charge.facility_energy_j == pytest.approx(300.0 * 3600)
    assert charge.cost == pytest.approx(0.3 * 0.10) and charge.co2_g == pytest.approx(60.0)
    assert books.tenant_hours[(0.0, "b")].gpu_hours == 0.5


def test_tenant_totals_add_up_to_the_meter_with_the_rest_as_idle() -> None:
    books = attribution()
    run(books, "j1", "a", 1000, 1800.0, 5400.0)
    run(books, "f", "b", 500, 0.0, 3600.0)
    run(books, "j2", "a", 1000, 6000.0, 6600.0)  # 600 W for 600 s in the second hour: 0.1 kWh, 0.04, 20 g
    # The meter saw the node draw 400 W of GPUs + 200 W of host for two hours: 900 W at the meter,
    # 1.8 kWh, 0.9 x 0.10 + 0.9 x 0.40 = 0.45, 360 g.
    books.meter.add(0.0, 7200.0, gpu_power_w=400.0, host_power_w=200.0)
    assert books.tenant_totals() == {
        # the rest: 1.8 - 0.6 - 0.3 - 0.1 kWh, 0.45 - 0.15 - 0.03 - 0.04, 360 - 120 - 60 - 20 g
        "(idle)": {"energy_kwh": 0.8, "cost": 0.23, "co2_kg": 0.16, "gpu_hours": 0.0},
        "a": {"energy_kwh": 0.7, "cost": 0.19, "co2_kg": 0.14, "gpu_hours": 1.167},  # 1 h + 600 s
        "b": {"energy_kwh": 0.3, "cost": 0.03, "co2_kg": 0.06, "gpu_hours": 0.5},
    }


def test_tenant_totals_round_to_three_places() -> None:
    books = attribution()
    run(books, "j", "a", 1000, 0.0, 1.0)  # 600 J = 0.000167 kWh
    books.meter.add(0.0, 1.0, gpu_power_w=400.0, host_power_w=200.0)
    totals = books.tenant_totals()
    assert totals["a"] == {"energy_kwh": 0.0, "cost": 0.0, "co2_kg": 0.0, "gpu_hours": 0.0}
    assert list(totals) == ["(idle)", "a"]


def test_node_draw_is_metered_per_hour_with_sleep_time() -> None:
    books = attribution()
    books.node_draw("n0", 2, 1800.0, 5400.0, gpu_w=100.0, host_w=200.0, asleep=False)
    books.node_draw("n1", 2, 0.0, 3600.0, gpu_w=0.0, host_w=8.0, asleep=True)
    assert sorted(books.node_hours) == [(0.0, "n0"), (0.0, "n1"), (3600.0, "n0")]
    awake = books.node_hours[(3600.0, "n0")]
    kwh = 450.0 * 1800 / 3.6e6  # 300 W x PUE 1.5 for the half hour after 1:00
    assert awake == Usage(gpu_hours=1.0, gpu_energy_j=100.0 * 1800, facility_energy_j=pytest.approx(450.0 * 1800),
                          cost=pytest.approx(kwh * 0.40), co2_g=pytest.approx(kwh * 200), asleep_s=0.0,
                          modelled_s=1800.0)  # no counters read: modelled
    asleep = books.node_hours[(0.0, "n1")]
    assert asleep.asleep_s == 3600.0 and asleep.gpu_hours == 2.0
    assert asleep.facility_energy_j == pytest.approx(12.0 * 3600)


def test_pieces_are_cut_at_hours_and_at_price_changes_inside_an_hour() -> None:
    site = Site(pue=1.0, tariff=TimeSeries((0.0, 900.0, 4000.0), (1.0, 2.0, 3.0)),
                carbon=TimeSeries((0.0, 3600.0), (100.0, 400.0)))
    books = Attribution(EnergyMeter(site))
    job = Job(job_id="j", tenant="a", gpus=1, duration_s=4000)
    # 1000 W for [0, 4200): 900 s at 1.0, 2700 s at 2.0, 400 s at 2.0, 200 s at 3.0 (kWh = s / 3600).
    charge = books.job_ran(job, {"n0": 1000}, 0.0, 4200.0, {"n0": 1000.0}, {"n0": 0.0}, {"n0": 1})
    assert charge.cost == pytest.approx((900 * 1.0 + 2700 * 2.0 + 400 * 2.0 + 200 * 3.0) / 3600)
    assert books.tenant_hours[(0.0, "a")].cost == pytest.approx((900 * 1.0 + 2700 * 2.0) / 3600)
    assert books.tenant_hours[(3600.0, "a")].cost == pytest.approx((400 * 2.0 + 200 * 3.0) / 3600)
    assert charge.co2_g == pytest.approx(3600 / 3600 * 100 + 600 / 3600 * 400)  # 1 kWh at 100, 1/6 at 400


def test_a_bucket_adds_up_every_piece_in_its_hour() -> None:
    books = attribution()
    books.node_draw("n0", 2, 600.0, 1200.0, gpu_w=100.0, host_w=200.0, asleep=True)
    books.node_draw("n0", 2, 1800.0, 2400.0, gpu_w=100.0, host_w=200.0, asleep=True)
    bucket = books.node_hours[(0.0, "n0")]
    assert bucket.asleep_s == 1200.0 and bucket.gpu_hours == pytest.approx(2 * 1200 / 3600)
    assert bucket.gpu_energy_j == 100.0 * 1200


def test_tenant_co2_is_in_kilograms() -> None:
    books = attribution()
    big = Job(job_id="big", tenant="a", gpus=2, duration_s=36_000)
    books.job_ran(big, {"n0": 2000}, 0.0, 36_000.0, {"n0": 300.0}, {"n0": 200.0}, {"n0": 2})
    books.meter.add(0.0, 36_000.0, gpu_power_w=600.0, host_power_w=200.0)
    # The job: (600 + 200) W x 1.5 for 10 h = 12 kWh, 2400 g; the meter saw the same: nothing idle.
    totals = books.tenant_totals()
    assert totals["a"]["co2_kg"] == 2.4 and totals["a"]["energy_kwh"] == 12.0
    assert totals["(idle)"] == {"energy_kwh": 0.0, "cost": 0.0, "co2_kg": 0.0, "gpu_hours": 0.0}
