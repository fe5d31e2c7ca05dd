#!/usr/bin/env python3
"""The StandardAuthorizer's cost per authorization with 10, 1,000 and 10,000 ACLs, no broker.

    python3 benchmarks/authorizer.py                 # 10, 1,000, 10,000 ACLs
    python3 benchmarks/authorizer.py --acls 10 100000 --lookups 50000

For each size the authorizer holds that many ACLs, generated the way a multi-tenant cluster has
them: per tenant ``i`` a LITERAL ALLOW of READ and WRITE on topic ``tenant-i-orders`` for
``User:tenant-i``, a PREFIXED ALLOW of ALL on ``tenant-i-`` topics, a LITERAL READ on group
``tenant-i-group``, and one DENY in ten (WRITE on ``tenant-i-audit``), plus a few ``*`` wildcard
ACLs; topic names get longer with the tenant number. It then times ``authorize()`` (what each
Produce partition, Fetch partition, group request ... asks) over a fixed mix of lookups — allowed
literal, allowed by prefix, denied by a DENY, denied for want of an ACL, a super user — and
reports the best of ``--repeat`` passes as microseconds per call. The index looks up a resource
by its exact name and by the prefixes of its name that some PREFIXED ACL has; its cost must not
grow with the number of ACLs (Kafka's TreeMap-based StandardAuthorizerData has the same aim).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the odradek of this checkout

from odradek.security.acl import AclPermissionType, PatternType, ResourceType, StandardAcl
from odradek.security.standard_authorizer import StandardAuthorizer
from odradek.server.acl_operations import AclOperation as Op

T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def build(n_acls: int) -> tuple[StandardAuthorizer, int]:
    a = StandardAuthorizer({"User:admin"})
    added = 0
    tenant = 0

    def add(acl: StandardAcl) -> None:
        nonlocal added
        a.cache.add(uuid.uuid4(), acl)
        added += 1

    for p in ("User:ops", "User:monitor"):
        add(StandardAcl(T, "*", LIT, p, "*", Op.DESCRIBE, ALLOW))
    while added < n_acls:
        user = f"User:tenant-{tenant}"
        prefix = f"tenant-{tenant}-"
        for acl in (
            StandardAcl(T, prefix + "orders", LIT, user, "*", Op.READ, ALLOW),
            StandardAcl(T, prefix + "orders", LIT, user, "*", Op.WRITE, ALLOW),
            StandardAcl(T, prefix, PRE, user, "*", Op.ALL, ALLOW),
            StandardAcl(G, prefix + "group", LIT, user, "*", Op.READ, ALLOW),
        ):
            if added < n_acls:
                add(acl)
        if tenant % 10 == 0 and added < n_acls:
            add(StandardAcl(T, prefix + "audit", LIT, user, "*", Op.WRITE, DENY))
        tenant += 1
    return a, max(tenant, 1)


def lookups(tenants: int, count: int, seed: int = 7) -> list[tuple[str, Op, ResourceType, str]]:
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        t = rnd.randrange(tenants)
        user, prefix = f"User:tenant-{t}", f"tenant-{t}-"
        kind = i % 5
        if kind == 0:
            out.append((user, Op.WRITE, T, prefix + "orders"))          # literal ALLOW
        elif kind == 1:
            out.append((user, Op.READ, T, prefix + "payments-eu-1"))    # by prefix
        elif kind == 2:
            out.append((user, Op.WRITE, T, f"tenant-{t - t % 10}-audit"))  # DENY (or no ACL)
        elif kind == 3:
            out.append((f"User:tenant-{(t + 1) % tenants}", Op.READ, G, prefix + "group"))  # no ACL for them
        else:
            out.append(("User:admin", Op.DELETE, T, prefix + "orders"))  # super user
    return out


def measure(a: StandardAuthorizer, calls: list[tuple[str, Op, ResourceType, str]], repeat: int) -> tuple[float, int]:
    authorize = a.authorize
    best = float("inf")
    allowed = 0
    for _ in range(repeat):
        allowed = 0
        start = time.perf_counter()
        for principal, op, rtype, name in calls:
            if authorize(principal, "127.0.0.1", op, rtype, name, False):
                allowed += 1
        best = min(best, time.perf_counter() - start)
    return best / len(calls) * 1e6, allowed


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--acls", type=int, nargs="+", default=[10, 1_000, 10_000])
    ap.add_argument("--lookups", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ns = ap.parse_args(argv)
    print(f"{'ACLs':>8} {'tenants':>8} {'us/authorize':>13} {'allowed':>8}")
    for n in ns.acls:
        a, tenants = build(n)
        calls = lookups(tenants, ns.lookups)
        us, allowed = measure(a, calls, ns.repeat)
        print(f"{len(a.cache):>8} {tenants:>8} {us:>13.2f} {allowed / len(calls):>8.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
