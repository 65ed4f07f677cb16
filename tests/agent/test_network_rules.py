"""The agent's side of network rules without a kernel: the script it renders, what it
reports, and that a refused set leaves the previous one (the namespace tests in
tests/network/ run the same code against nftables itself)."""

import asyncio

import pytest

from agent import firewall
from agent import protocol as wire

WEB = wire.NetInterface(ifname="gc7", address="10.231.1.7/32",
                        inbound=[wire.NetRule(proto="tcp", peers=["10.231.1.8/32"], ports=(22, 23))],
                        outbound=[wire.NetRule(proto="any", peers=["0.0.0.0/0"])])


def ruleset(version: int, interfaces=(WEB,)) -> wire.Ruleset:
    return wire.Ruleset(version=version, hash=wire.ruleset_digest(list(interfaces)), interfaces=list(interfaces))


def test_the_script_replaces_its_own_table_whole():
    script = firewall.render([WEB])
    assert script.startswith("table inet gpuconsole\ndelete table inet gpuconsole\ntable inet gpuconsole {")
    assert 'iifname vmap { "gc7" : jump out_0 }' in script
    assert "ip saddr 10.231.1.8/32 tcp dport 22-23 accept" in script
    assert "ip saddr != 10.231.1.7 drop" in script


def test_an_empty_set_keeps_only_the_forward_chain():
    assert "vmap" not in firewall.render([])


def test_an_applied_set_is_reported_with_its_version_and_hash(tmp_path):
    enforcer = firewall.Enforcer(state_path=tmp_path / "rules.json", nft=("true",))
    report = enforcer.apply(ruleset(3))
    assert (report.ok, report.version, report.hash) == (True, 3, wire.ruleset_digest([WEB]))
    assert (tmp_path / "rules.json").exists()


def test_a_refused_set_keeps_the_previous_version(tmp_path):
    enforcer = firewall.Enforcer(state_path=tmp_path / "rules.json", nft=("true",))
    enforcer.apply(ruleset(3))
    enforcer.nft = ("false",)
    report = enforcer.apply(ruleset(4, [WEB, WEB]))
    assert (report.ok, report.version, report.offered) == (False, 3, 4)
    assert "refused the ruleset" in report.error
    assert firewall.Enforcer(state_path=tmp_path / "rules.json", nft=("true",)).restore().version == 3


def test_a_hash_that_does_not_match_is_refused():
    enforcer = firewall.Enforcer(nft=("true",))
    forged = wire.Ruleset(version=2, hash="0" * 64, interfaces=[WEB])
    assert "hash does not match" in enforcer.apply(forged).error


def test_an_unreadable_frame_is_reported_not_raised():
    report = firewall.Enforcer(nft=("true",)).apply_text('{"type":"ruleset","version":1,"hash":"x"}')
    assert not report.ok and "cannot read" in report.error


def test_the_answer_goes_back_on_the_socket():
    sent = []

    class Socket:
        async def send(self, text):
            sent.append(text)

    frame = wire.encode(ruleset(5))
    asyncio.run(firewall.answer(Socket(), frame, firewall.Enforcer(nft=("true",))))
    asyncio.run(firewall.answer(Socket(), frame, None))
    assert sent[0].startswith('{"type":"ruleset_applied","version":5')
    assert firewall.NOT_ENFORCED in sent[1]


def test_a_list_of_peers_is_one_named_set_shared_by_the_chains():
    group = ["10.231.1.7/32", "10.231.1.8/32"]
    a = wire.NetInterface(ifname="gc7", address="10.231.1.7/32", inbound=[wire.NetRule(proto="any", peers=group)],
                          outbound=[])
    b = wire.NetInterface(ifname="gc8", address="10.231.1.8/32", inbound=[wire.NetRule(proto="any", peers=group)],
                          outbound=[])
    script = firewall.render([a, b])
    assert script.count("set p_0 {") == 1 and "set p_1" not in script
    assert script.count("ip saddr @p_0 accept") == 2


async def test_a_connected_agent_applies_a_ruleset_and_reports_it(server_class, make_link, replay, small_trace,
                                                                   tmp_path):
    from agent import runner
    from agent.spool import Spool

    class RulesServer(server_class):
        """Sends a ruleset before its first ack, and keeps the agent's reports."""

        reports: list = []
        sent = False

        async def _samples(self, ws, frame):
            if frame.get("type") == "ruleset_applied":
                self.reports.append(frame)
                return
            if not self.sent:
                self.sent = True
                await ws.send(wire.encode(ruleset(9)))
            await super()._samples(ws, frame)

    async with RulesServer() as server:
        source = replay(small_trace)
        link = make_link(server.url, Spool(tmp_path / "spool"), source)
        link.network = firewall.Enforcer(state_path=tmp_path / "rules.json", nft=("true",))
        assert await asyncio.wait_for(runner.run(source, {source.host: link}, once=True), 15) == 0
    assert [(r["version"], r["ok"]) for r in server.reports] == [(9, True)]
    assert len(server.received) == 20  # the samples went on as before


def test_a_rule_naming_a_group_allows_its_members_and_an_empty_group_nothing():
    rule = wire.NetRule(proto="tcp", group="g4", ports=(5432, 5432))
    web = wire.NetInterface(ifname="gc7", address="10.231.1.7/32", inbound=[rule], outbound=[])
    members = firewall.render([web], {"g4": ["10.231.1.8/32", "10.231.1.9/32"]})
    assert "elements = { 10.231.1.8/32, 10.231.1.9/32 }" in members
    assert "ip saddr @p_0 tcp dport 5432 accept" in members
    assert "dport 5432" not in firewall.render([web], {"g4": []})


async def test_an_agent_waiting_for_its_next_sample_applies_a_ruleset_at_once(server_class, make_link, replay,
                                                                              small_trace, tmp_path):
    from agent import runner
    from agent.spool import Spool

    class RulesServer(server_class):
        """Acks the first samples, then sends a ruleset; notes what comes next."""

        seen: list = []
        reported = asyncio.Event()

        async def _samples(self, ws, frame):
            self.seen.append(frame.get("type"))
            if frame.get("type") == "ruleset_applied":
                self.reported.set()
                return
            await super()._samples(ws, frame)
            if len(self.seen) == 1:
                await ws.send(wire.encode(ruleset(2)))

    async with RulesServer() as server:
        source = replay(small_trace, speed=0.05)  # a sample every 4 s
        link = make_link(server.url, Spool(tmp_path / "spool"), source)
        link.network = firewall.Enforcer(nft=("true",))
        agent = asyncio.create_task(runner.run(source, {source.host: link}))
        await asyncio.wait_for(server.reported.wait(), 10)
        source.stop_event.set()
        agent.cancel()
        await asyncio.gather(agent, return_exceptions=True)
    assert server.seen[:2] == ["samples", "ruleset_applied"]  # not held until the next sample


def test_a_restarted_agent_puts_its_rules_back_before_it_connects(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from agent import cli

    applied = []
    monkeypatch.setattr(firewall, "nft_apply", lambda script, nft=("nft",): applied.append(script))
    (tmp_path / "network-rules.json").write_text(wire.encode(ruleset(4)))
    link = SimpleNamespace(network=None)
    cli._enforce_network(SimpleNamespace(spool_dirs={"h": tmp_path}), {"h": link})
    assert link.network.version == 4 and len(applied) == 1
    assert 'jump in_0' in applied[0]


def test_a_simulated_host_checks_and_reports_its_rules_without_a_kernel(monkeypatch):
    monkeypatch.setattr(firewall, "nft_apply", lambda *a, **k: pytest.fail("a simulated host ran nft"))
    enforcer = firewall.Enforcer(nft=None)
    report = enforcer.apply(ruleset(7))
    assert (report.ok, report.version, report.error) == (True, 7, "")
    forged = wire.Ruleset(version=8, hash="0" * 64, interfaces=[WEB])
    assert "hash does not match" in enforcer.apply(forged).error


def test_sim_and_replay_agents_simulate_their_firewall_and_only_they_do():
    from agent import cli

    assert set(cli.SIMULATED_HOSTS) == {"sim", "replay"}

    class Link:
        network = None

    links = {"h1": Link(), "h2": Link()}
    cli._simulate_network(links)
    assert all(link.network is not None and link.network.nft is None for link in links.values())
