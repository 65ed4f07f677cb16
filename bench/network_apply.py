"""Applying a host's network rules: 1, 100 and 1,000 instances on one host.

    sudo .venv/bin/python bench/network_apply.py [--runs 7] [--team-size 20]
    sudo .venv/bin/python bench/network_apply.py --e2e 100 [--redis redis://127.0.0.1:6379/6]

Needs root, ``ip`` and ``nft``: everything happens in a network namespace the bench
makes and deletes. For each size it builds the rules the console sends a host (teams of
``--team-size`` instances in their default group: members reach each other, all
outbound; each instance also in a group allowing tcp 443 from 10.0.0.0/8 and tcp
8000-8100 from a /24) and reports, median of ``--runs``:

* render: the agent turning the ruleset into its nft script;
* apply: ``nft -f`` replacing the table in one transaction (the table is in place, as
  on a host that already enforces rules), what a change costs on the host;
* the same with every instance in one team (one group of 1,000 members);

beside two peers: ``nft -f`` of an empty table (the floor: a process and one netlink
transaction) and the same rules written naively, one rule per peer address in one
chain, no sets and no verdict maps. Then the console's side: computing a host's rules
(``network.rulesets.sync_host``: the database read, expansion, hash and frame) for the
same sizes, on a scratch SQLite database. With ``--e2e N`` (e.g. 100), instead of the
console's side, end to end: a console (daphne, channels-redis on ``--redis``) and a real agent link
(sim readings at 1 Hz) enforcing into the bench's namespace; each rule added or removed
through ``network.security_groups`` is timed until the console records the agent's report
of the new version. Goals (docs/benchmarks.md): 1,000 instances applied in ≤ 1 s,
atomically; a change applied and shown within 2 s.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent import firewall  # noqa: E402
from agent import protocol as wire  # noqa: E402

SIZES = (1, 100, 1000)


def interfaces(count: int, team_size: int) -> tuple[list[wire.NetInterface], dict[str, list[str]]]:
    hosts = ipaddress.IPv4Network("10.231.0.0/16").hosts()
    addresses = [f"{next(hosts)}/32" for _ in range(count)]
    groups = {f"g{start}": addresses[start:start + team_size] for start in range(0, count, team_size)}
    out = []
    for n, address in enumerate(addresses):
        out.append(wire.NetInterface(
            ifname=f"gc{n + 1}", address=address,
            inbound=[wire.NetRule(proto="any", group=f"g{n - n % team_size}"),
                     wire.NetRule(proto="tcp", peers=["10.0.0.0/8"], ports=(443, 443)),
                     wire.NetRule(proto="tcp", peers=["10.231.250.0/24"], ports=(8000, 8100))],
            outbound=[wire.NetRule(proto="any", peers=["0.0.0.0/0"])],
        ))
    return out, groups


def naive(ifaces: list[wire.NetInterface], groups: dict[str, list[str]]) -> str:
    """The same allow rules, one nft rule per interface and peer, in one chain."""
    lines = []
    for i in ifaces:
        own = i.address.split("/")[0]
        lines.append(f'iifname "{i.ifname}" ip saddr != {own} drop')
        for r in i.inbound:
            match = "" if r.proto == "any" else (f"{r.proto} dport {r.ports[0]}-{r.ports[1]} " if r.ports else "")
            peers = groups[r.group] if r.group else r.peers
            lines += [f'oifname "{i.ifname}" ip saddr {p} {match}accept' for p in peers]
        lines.append(f'oifname "{i.ifname}" drop')
    body = "\n".join(f"\t\t{line}" for line in lines)
    return (f"table inet naive\ndelete table inet naive\ntable inet naive {{\n\tchain forward {{\n"
            f"\t\ttype filter hook forward priority filter; policy accept;\n"
            f"\t\tct state established,related accept\n{body}\n\t}}\n}}\n")


EMPTY = "table inet floor\ndelete table inet floor\ntable inet floor {\n}\n"


def timed(runs: int, func, *args) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        func(*args)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def agent_side(ns: str, runs: int, team_size: int) -> None:
    nft = ("ip", "netns", "exec", ns, "nft")
    print(f"{'instances':>9}  {'rules':>6}  {'render ms':>9}  {'apply ms':>8}  {'one team':>8}  "
          f"{'naive ms':>8}  {'empty table ms':>14}  {'frame KiB':>9}")
    for count in SIZES:
        ifaces, groups = interfaces(count, team_size)
        one_team = firewall.render(*interfaces(count, count))
        script = firewall.render(ifaces, groups)
        firewall.nft_apply(script, nft)  # in place, as on a host already enforcing
        render_ms = timed(runs, firewall.render, ifaces, groups)
        apply_ms = timed(runs, firewall.nft_apply, script, nft)
        one_ms = timed(runs, firewall.nft_apply, one_team, nft)
        naive_ms = timed(runs, firewall.nft_apply, naive(ifaces, groups), nft)
        frame = wire.encode(wire.Ruleset(version=1, hash="0" * 64, interfaces=ifaces, groups=groups))
        empty_ms = timed(runs, firewall.nft_apply, EMPTY, nft)
        rules = sum(len(i.inbound) + len(i.outbound) for i in ifaces)
        print(f"{count:>9}  {rules:>6}  {render_ms:>9.1f}  {apply_ms:>8.1f}  {one_ms:>8.1f}  "
              f"{naive_ms:>8.1f}  {empty_ms:>14.1f}  {len(frame) / 1024:>9.1f}")
    listed = subprocess.run([*nft, "list", "table", "inet", firewall.TABLE], capture_output=True, text=True)
    print(f"  in force after the runs: {listed.stdout.count('chain ')} chains in table inet {firewall.TABLE}")


def console_side(runs: int, team_size: int) -> None:
    var = tempfile.mkdtemp(prefix="bench-network-")
    os.environ.update({"GPUCONSOLE_VAR_DIR": var, "INPROCESS_SCHEDULER": "false", "DJANGO_SETTINGS_MODULE":
                       "gpuconsole.settings"})
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from console.models import Team
    from instances.models import GpuModel, Host, Instance, Region, State
    from network import rulesets, security_groups, vpcs
    from network.models import HostRules, Interface, SecurityGroup

    rulesets.push = lambda host_id, frame: None  # no agent connected here
    region = Region.objects.create(name="bench")
    model = GpuModel.objects.create(name="H100-80GB", memory_gb=80)
    print(f"{'instances':>9}  {'sync_host ms':>12}  {'frame KiB':>9}")
    for count in SIZES:
        host = Host.objects.create(name=f"bench-{count}", region=region)
        teams = [Team.objects.create(name=f"t{count}-{k}", slug=f"t{count}-{k}")
                 for k in range((count + team_size - 1) // team_size)]
        made = Instance.objects.bulk_create([
            Instance(team=teams[n // team_size], name=f"i{n}", gpu_model=model, gpu_count=1,
                     pricing_model="on_demand", state=State.RUNNING, host=host) for n in range(count)])
        groups = {}
        for team in teams:
            _, subnet, groups[team.pk] = vpcs.ensure_defaults(actor="system", team=team)
            web = security_groups.create_group(actor="system", team=team, name="web", rules=[
                {"direction": "inbound", "protocol": "tcp", "port_from": 443, "cidr": "10.0.0.0/8"}])
            groups[team.pk] = (subnet, groups[team.pk], web)
        base = {t.pk: ipaddress.IPv4Network(groups[t.pk][0].cidr).network_address + 2 for t in teams}
        rows = Interface.objects.bulk_create([
            Interface(instance=i, team_id=i.team_id, subnet=groups[i.team_id][0],
                      address=str(base[i.team_id] + n % team_size)) for n, i in enumerate(made)])
        through = SecurityGroup.interfaces.through
        through.objects.bulk_create([through(interface_id=r.pk, securitygroup_id=g.pk)
                                     for r in rows for g in groups[r.team_id][1:]])

        ms = timed(runs, _sync_anew, host.pk)
        frame = HostRules.objects.get(host=host).frame
        print(f"{count:>9}  {ms:>12.1f}  {len(frame) / 1024:>9.1f}")


def _sync_anew(host_id: int) -> None:
    from network import rulesets
    from network.models import HostRules

    HostRules.objects.filter(host_id=host_id).update(hash="")  # as if the rules had changed
    rulesets.sync_host(host_id=host_id)


E2E_SEED = """
import json
from django.contrib.auth.models import User
from console.models import Team
from instances.models import GpuModel, Host, Instance, Region, State
from instances.inventory import add_gpu
from monitoring import services as monitoring_services
from network import interfaces, rulesets, security_groups, vpcs
ops = User.objects.create_user("ops", is_staff=True)
region = Region.objects.create(name="bench-1")
model = GpuModel.objects.create(name="H100-80GB", memory_gb=80, power_limit_w=700)
host = Host.objects.create(name="bench-net-host", region=region)
gpus = [{{"uuid": f"GPU-bench-net-{{i}}", "index": i, "name": "H100-80GB", "memory_total": 80 * 2**30,
         "power_limit_mw": 700000}} for i in range(8)]
for g in gpus:
    add_gpu(actor=ops, host=host, index=g["index"], uuid=g["uuid"], model=model, memory_total=g["memory_total"])
token = monitoring_services.create_host_token(actor=ops, host=host)[1]
team = Team.objects.create(name="Acme", slug="acme")
later, rulesets.resync_on_commit = rulesets.resync_on_commit, lambda *a, **k: None  # one version at the end
for n in range({count}):
    instance = Instance.objects.create(team=team, name=f"i{{n}}", gpu_model=model, gpu_count=1,
                                       pricing_model="on_demand", state=State.RUNNING, host=host)
    interfaces.attach_instance(actor=ops, instance=instance)
rulesets.resync_on_commit = later
rulesets.resync(hosts=[host.pk])
group = vpcs.default_group(actor=ops, team=team)
json.dump({{"host": host.name, "host_id": host.pk, "token": token, "gpus": gpus, "group": group.pk,
           "address": Instance.objects.get(name="i0").interface.address}}, open({out!r}, "w"))
"""


def end_to_end(args, ns: str) -> None:
    import asyncio
    import json

    var = Path(tempfile.mkdtemp(prefix="bench-network-e2e-"))
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env |= {"GPUCONSOLE_VAR_DIR": str(var), "REDIS_URL": args.redis, "INPROCESS_SCHEDULER": "false",
            "CELERY_TASK_ALWAYS_EAGER": "true", "DJANGO_SETTINGS_MODULE": "gpuconsole.settings"}
    redis_db = subprocess.run(["redis-cli", "-u", args.redis, "flushdb"], capture_output=True, text=True)
    if redis_db.returncode:
        print(f"end to end: skipped, no Redis at {args.redis} ({redis_db.stderr.strip()})")
        return
    manage = [sys.executable, str(ROOT / "manage.py")]
    out = var / "seed.json"
    for step in (["migrate", "--noinput", "-v0"],
                 ["shell", "-v0", "-c", E2E_SEED.format(count=args.e2e, out=str(out))]):
        done = subprocess.run(manage + step, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"manage.py {step[0]} failed:\n{done.stderr[-3000:]}")
    seed = json.loads(out.read_text())
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daphne = subprocess.Popen([str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                               "gpuconsole.asgi:application"], cwd=ROOT, env=env,
                              stdout=open(var / "daphne.log", "w"), stderr=subprocess.STDOUT)
    try:
        os.environ.update(env)
        import django

        django.setup()
        asyncio.run(_drive(args, ns, seed, port, var))
    finally:
        daphne.terminate()
        daphne.wait(10)


async def _drive(args, ns: str, seed: dict, port: int, var: Path) -> None:
    import asyncio
    import urllib.request

    from agent import runner
    from agent.backends.sim import SimSource
    from agent.spool import Spool
    from agent.uplink import HostLink
    from network import security_groups
    from network.models import HostRules, SecurityGroup

    for _ in range(100):
        try:
            await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{port}/healthz")
            break
        except OSError:
            await asyncio.sleep(0.2)
    source = SimSource.from_fleet([{"host": seed["host"], "token": seed["token"], "gpus": seed["gpus"]}])
    info = source.hosts()[0]
    link = HostLink(server=f"ws://127.0.0.1:{port}/ws/agent/", host=info.host, token=seed["token"], gpus=info.gpus,
                    backend="sim", spool=Spool(var / "spool"))
    link.network = firewall.Enforcer(state_path=var / "rules.json", nft=("ip", "netns", "exec", ns, "nft"))
    agent = asyncio.create_task(runner.run(source, {info.host: link}))

    def in_force(version: int) -> bool:
        rules = HostRules.objects.get(host_id=seed["host_id"])
        return rules.applied_version >= version and rules.in_force

    async def until_applied(version: int, started: float) -> float:
        while not await asyncio.to_thread(in_force, version):
            if time.perf_counter() - started > 30:
                raise SystemExit("end to end: the host did not apply the change within 30 s")
            await asyncio.sleep(0.01)
        return (time.perf_counter() - started) * 1000

    group = await asyncio.to_thread(SecurityGroup.objects.get, pk=seed["group"])
    first = await until_applied(1, time.perf_counter())
    print(f"end to end, {args.e2e} instances on the host, a real agent link at 1 Hz, channels-redis:")
    print(f"  first version in force {first / 1000:.1f} s after the agent started")
    times = []
    for k in range(args.runs):
        def change(k=k):
            if k % 2 == 0:
                security_groups.add_rule(actor="system", group=group, direction="inbound", protocol="tcp",
                                  port_from=9000 + k, cidr="10.0.0.0/8")
            else:
                security_groups.remove_rule(actor="system", rule=group.rules.order_by("-id").first())
            return HostRules.objects.get(host_id=seed["host_id"]).version

        started = time.perf_counter()
        version = await asyncio.to_thread(change)
        times.append(await until_applied(version, started))
    print(f"  change -> in force and shown: median {statistics.median(times):.0f} ms, "
          f"max {max(times):.0f} ms over {len(times)} changes ({', '.join(f'{t:.0f}' for t in times)})")
    source.stop_event.set()
    agent.cancel()
    await asyncio.gather(agent, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--team-size", type=int, default=20)
    parser.add_argument("--e2e", type=int, default=0, metavar="N", help="run end to end with N instances instead")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/6", help="channel layer of the end-to-end run")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/network_apply.py applies rules in a network namespace: run it as root")
    ns = f"gcbench{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        version = subprocess.run(["nft", "--version"], capture_output=True, text=True).stdout.strip()
        print(f"{version}; kernel {os.uname().release}; {os.cpu_count()} CPUs; median of {args.runs}")
        if args.e2e:
            end_to_end(args, ns)
        else:
            agent_side(ns, args.runs, args.team_size)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    if not args.e2e:
        console_side(args.runs, args.team_size)


if __name__ == "__main__":
    main()
