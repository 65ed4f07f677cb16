"""Network rules on the host: the console's desired ruleset rendered into one nftables
table of its own and applied in one transaction (docs/network.md).

The table ``inet gpuconsole`` has a base chain on the forward hook that sends a packet
leaving an instance's interface to that interface's ``out_N`` chain and a packet going
to one to its ``in_N`` chain, each through one verdict map (a lookup, not a rule per
interface). A list of peers is one named set, shared by every chain that names it.
Replies of allowed connections pass by their conntrack state; an instance
may send only from its own address; what no rule allows is dropped.

``nft -f`` runs the whole script as one transaction: the old table is deleted and the
new one made together, or, when the kernel refuses anything, nothing changes and the
previous rules stay in force.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path

import msgspec

from . import protocol
from .protocol import NetInterface, NetRule, Ruleset, RulesetApplied

log = logging.getLogger("gpuconsole.agent")

TABLE = "gpuconsole"
PREFIX = "gc"  # instances' links on the host are named gc<instance id>
NFT_TIMEOUT_S = 20.0
_decoder = msgspec.json.Decoder(Ruleset)


class ApplyError(Exception):
    """The kernel (or nft) refused the ruleset; the previous one is still in force."""


def _peers(field: str, rule: NetRule, sets: dict[tuple[str, ...], str], groups: dict[str, list[str]]) -> str | None:
    """``ip saddr @…`` for the rule's peers (a group's members, or a list of CIDRs: one
    named set per distinct list, shared by every chain that names it), nothing where a
    peer is everywhere, or None where there is no peer at all (the rule allows nothing)."""
    peers = groups.get(rule.group, []) if rule.group else rule.peers
    if not peers:
        return None
    if any(p.endswith("/0") for p in peers):  # the wire schema's CIDR4 pattern: "/0" is everywhere
        return ""
    key = tuple(sorted(set(peers)))
    if len(key) == 1:
        return f"ip {field} {key[0]} "
    name = sets.setdefault(key, f"p_{len(sets)}")
    return f"ip {field} @{name} "


def _match(rule: NetRule) -> str:
    if rule.proto == "any":
        return ""
    if rule.proto == "icmp":
        return "meta l4proto icmp "
    if rule.ports is None:
        return f"meta l4proto {rule.proto} "
    low, high = rule.ports
    return f"{rule.proto} dport {low} " if low == high else f"{rule.proto} dport {low}-{high} "


def _chain(name: str, lines: list[str]) -> list[str]:
    return [f"\tchain {name} {{", *(f"\t\t{line}" for line in lines), "\t}"]


def render(interfaces: list[NetInterface], groups: dict[str, list[str]] | None = None) -> str:
    """The nft script that replaces the table with these interfaces' rules (``groups``:
    the members' addresses of the groups the rules name)."""
    groups = groups or {}
    ordered = sorted(interfaces, key=lambda i: i.ifname)
    forward = ["type filter hook forward priority filter; policy accept;"]
    chains: list[str] = []
    sets: dict[tuple[str, ...], str] = {}
    if ordered:
        forward.append("ct state established,related accept")
        outs = ", ".join(f'"{i.ifname}" : jump out_{n}' for n, i in enumerate(ordered))
        ins = ", ".join(f'"{i.ifname}" : jump in_{n}' for n, i in enumerate(ordered))
        forward += [f"iifname vmap {{ {outs} }}", f"oifname vmap {{ {ins} }}"]
    # An instance's link the console did not list (not placed yet, or gone) carries nothing.
    forward += [f'iifname "{PREFIX}*" drop', f'oifname "{PREFIX}*" drop']
    for n, iface in enumerate(ordered):
        own = iface.address.split("/")[0]
        # Allowed outbound goes on to the destination's inbound chain (``return``);
        # allowed inbound is accepted.
        out = ["meta nfproto != ipv4 drop", f"ip saddr != {own} drop"]
        out += [f"{peers}{_match(r)}return" for r in iface.outbound
                if (peers := _peers("daddr", r, sets, groups)) is not None]
        chains += _chain(f"out_{n}", [*out, "drop"])
        inbound = ["meta nfproto != ipv4 drop"]
        inbound += [f"{peers}{_match(r)}accept" for r in iface.inbound
                    if (peers := _peers("saddr", r, sets, groups)) is not None]
        chains += _chain(f"in_{n}", [*inbound, "drop"])
    named = []
    for peers, name in sets.items():
        named += [f"\tset {name} {{", "\t\ttype ipv4_addr; flags interval; auto-merge;",
                  f"\t\telements = {{ {', '.join(peers)} }}", "\t}"]
    return "\n".join([
        f"table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        *named,
        *_chain("forward", forward),
        *chains,
        "}",
        "",
    ])


def nft_apply(script: str, nft: tuple[str, ...] = ("nft",)) -> None:
    """Run ``script`` with ``nft -f -``: all of it or, on any error, none of it."""
    try:
        done = subprocess.run([*nft, "-f", "-"], input=script, capture_output=True, text=True, timeout=NFT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ApplyError(f"could not run {nft[-1]}: {exc}") from None
    if done.returncode != 0:
        first = (done.stderr or done.stdout or "").strip().splitlines()
        raise ApplyError(f"{nft[-1]} refused the ruleset: {first[0] if first else f'exit {done.returncode}'}")


class Enforcer:
    """Applies rulesets for one host and remembers the last one in force (in memory and,
    with ``state_path``, on disk, so a restarted agent puts it back before it connects).
    With ``nft=None`` the host is a simulated one (``--backend sim`` or ``replay``): each
    ruleset is checked and rendered as for a real host but put into no kernel."""

    def __init__(self, *, state_path: Path | None = None, nft: tuple[str, ...] | None = ("nft",)):
        self.state_path = state_path
        self.nft = nft
        self.version = 0
        self.hash = ""

    def apply(self, ruleset: Ruleset) -> RulesetApplied:
        """Apply ``ruleset`` unless it is the one in force; the report for the server."""
        digest = protocol.ruleset_digest(ruleset.interfaces, ruleset.groups)
        if digest != ruleset.hash:
            return self._refused(ruleset, "the ruleset's hash does not match its interfaces")
        if ruleset.version == self.version and digest == self.hash:
            return RulesetApplied(version=self.version, hash=self.hash, ok=True, offered=ruleset.version)
        started = time.monotonic()
        try:
            script = render(ruleset.interfaces, ruleset.groups)
            if self.nft is not None:
                nft_apply(script, self.nft)
        except (ApplyError, ValueError) as exc:
            return self._refused(ruleset, str(exc))
        self.version, self.hash = ruleset.version, digest
        self._save(ruleset)
        log.info("network rules version %d applied (%d interfaces, %.0f ms)", ruleset.version,
                 len(ruleset.interfaces), (time.monotonic() - started) * 1000)
        return RulesetApplied(version=self.version, hash=self.hash, ok=True, offered=ruleset.version)

    def apply_text(self, text: str) -> RulesetApplied:
        """A ``ruleset`` frame as the server sent it."""
        try:
            ruleset = _decoder.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return RulesetApplied(version=self.version, hash=self.hash, ok=False,
                                  error=f"a ruleset this agent cannot read: {exc}"[: protocol.MAX_MESSAGE])
        return self.apply(ruleset)

    def restore(self) -> RulesetApplied | None:
        """Put back the last ruleset saved on disk (after a restart or a reboot)."""
        if self.state_path is None or not self.state_path.exists():
            return None
        report = self.apply_text(self.state_path.read_text())
        if not report.ok:
            log.error("could not restore network rules from %s: %s", self.state_path, report.error)
        return report

    def _refused(self, ruleset: Ruleset, why: str) -> RulesetApplied:
        log.error("network rules version %d refused; version %d stays in force: %s",
                  ruleset.version, self.version, why)
        return RulesetApplied(version=self.version, hash=self.hash, ok=False, offered=ruleset.version,
                              error=why[: protocol.MAX_MESSAGE])

    def _save(self, ruleset: Ruleset) -> None:
        if self.state_path is None:
            return
        partial = self.state_path.with_suffix(".tmp")
        partial.write_text(protocol.encode(ruleset))
        os.replace(partial, self.state_path)


NOT_ENFORCED = "this agent does not apply network rules (start it with --network)"


async def answer(ws, text: str, enforcer: Enforcer | None) -> None:
    """Apply a ``ruleset`` frame (in a thread: nft takes milliseconds) and report back."""
    import asyncio

    if enforcer is None:
        offered = json.loads(text).get("version", 0)
        report = RulesetApplied(version=0, hash="", ok=False, offered=offered if isinstance(offered, int) else 0,
                                error=NOT_ENFORCED)
    else:
        report = await asyncio.to_thread(enforcer.apply_text, text)
    await ws.send(protocol.encode(report))
