"""The instance page, the cost explorer and the team page show the same kWh and kg CO2e
as GET /api/v1/energy/ for the same instance, team and period; charlie sees none of it."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from billing import pricing
from monitoring.models import Rollup1m
from savings import energy


@pytest.fixture
def carbon(ops, fleet):
    energy.set_footprint(actor=ops, region=fleet["region"], pue="1.20", grid_g_co2e_per_kwh="400")


def _figures(html: str, marker: str) -> tuple[str, str]:
    block = html[html.index(marker):]
    kwh = re.search(r"([0-9.]+) kWh", block).group(1)
    kg = re.search(r"([0-9.]+) kg CO2e", block).group(1)
    return kwh, kg


def test_the_instance_page_shows_the_apis_energy(bob, acme, metered, carbon, client, api):
    body = api(bob).get(f"/api/v1/energy/?team={acme.pk}").json()
    mine = next(r for r in body["instances"] if r["instance"] == metered.pk)
    client.force_login(bob)
    page = client.get(f"/instances/{metered.pk}/").content.decode()
    assert _figures(page, 'id="instance-energy"') == (f"{mine['it_kwh']:.2f}", f"{mine['kg_co2e']:.2f}")
    assert mine["it_kwh"] == pytest.approx(2.7, rel=0.001)


def test_the_cost_explorer_shows_the_apis_energy_for_its_month(alice, acme, metered, carbon, client, api):
    month = timezone.now().strftime("%Y-%m")
    total = api(alice).get(f"/api/v1/energy/?team={acme.pk}&month={month}").json()["total"]
    client.force_login(alice)
    page = client.get(f"/costs/?team={acme.pk}&month={month}").content.decode()
    assert _figures(page, 'class="team-energy"') == (f"{total['it_kwh']:.2f}", f"{total['kg_co2e']:.2f}")
    # the counters' 2.7 kWh, less what they counted before the month began (in its first
    # 90 minutes)
    before = Rollup1m.objects.filter(instance=metered, bucket__lt=pricing.month_start(timezone.now()))
    kwh = 2.7 - sum(r.energy_mj_delta for r in before) / energy.MJ_PER_KWH
    assert total["kg_co2e"] == pytest.approx(kwh * 1.2 * 0.4, rel=0.001)


def test_the_team_page_shows_the_apis_energy(bob, acme, metered, carbon, client, api):
    total = api(bob).get(f"/api/v1/energy/?team={acme.pk}").json()["total"]
    client.force_login(bob)
    page = client.get("/team/").content.decode()
    assert _figures(page, f'class="team-energy" data-team="{acme.pk}"') == (
        f"{total['it_kwh']:.2f}", f"{total['kg_co2e']:.2f}")


def test_charlie_sees_no_energy_of_acme(charlie, acme, metered, client, api):
    client.force_login(charlie)
    assert f'data-team="{acme.pk}"' not in client.get("/team/").content.decode()
    assert client.get(f"/instances/{metered.pk}/").status_code == 404


def test_a_bad_month_is_named(alice, acme, api):
    for month in ("2026-13", "december", "2999-01", "0000-05", "１２３４-05"):
        response = api(alice).get(f"/api/v1/energy/?team={acme.pk}&month={month}")
        assert response.status_code == 400 and "month" in response.json()


def test_the_cost_explorer_shows_an_earlier_months_energy_not_the_last_weeks(alice, acme, metered, carbon, client,
                                                                            api):
    # two months back: in the first 90 minutes of a month, the last month has some of
    # the instance's counters too
    last = pricing.month_start(pricing.month_start(timezone.now()) - timedelta(days=1))
    earlier = pricing.month_start(last - timedelta(days=1))
    gpu = Rollup1m.objects.filter(instance=metered).first().gpu_id
    Rollup1m.objects.create(bucket=earlier + timedelta(days=1), gpu_id=gpu, instance=metered, team_id=acme.pk,
                            samples=60, observed_s=60, energy_mj_delta=int(0.5 * 3.6e9), energy_mj_last=10**12)
    month = earlier.strftime("%Y-%m")
    total = api(alice).get(f"/api/v1/energy/?team={acme.pk}&month={month}").json()["total"]
    assert total["it_kwh"] == pytest.approx(0.5)
    client.force_login(alice)
    page = client.get(f"/costs/?team={acme.pk}&month={month}").content.decode()
    assert _figures(page, 'class="team-energy"') == ("0.50", f"{total['kg_co2e']:.2f}")


def test_without_a_regions_footprint_the_pages_say_so_rather_than_repeat_the_gpus_kwh(bob, acme, metered, client,
                                                                                        api):
    total = api(bob).get(f"/api/v1/energy/?team={acme.pk}").json()["total"]
    assert total["kg_co2e"] is None
    client.force_login(bob)
    for path in ("/team/", f"/costs/?team={acme.pk}"):
        page = client.get(path).content.decode()
        line = page[page.index('class="team-energy"'):].split("</p>", 1)[0]
        assert re.findall(r"([0-9.]+) kWh", line) == [f"{total['it_kwh']:.2f}"], line
        assert "PUE" not in line.split("not known", 1)[0] and "no PUE or grid intensity set" in line, line
