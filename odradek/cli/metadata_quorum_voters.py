"""``odradek metadata-quorum add-controller`` / ``remove-controller`` (KIP-853), as
``kafka-metadata-quorum.sh``:

* ``add-controller --command-config FILE [--dry-run]``: ``FILE`` is the configuration of the
  controller to add (``node.id``, ``process.roles`` with ``controller``, ``controller.listener.names``,
  ``listeners`` / ``advertised.listeners``, ``metadata.log.dir`` or ``log.dirs`` whose
  ``meta.properties`` holds its directory id); sends AddRaftVoter to the active controller and
  prints ``Added controller N with directory id D and endpoints: NAME://host:port``;
* ``remove-controller --controller-id N --controller-directory-id D [--dry-run]``: sends
  RemoveRaftVoter and prints ``Removed KRaft controller N with directory id D``.

A NOT_LEADER_OR_FOLLOWER / NOT_CONTROLLER answer makes the tool look for the active controller
again (until ``default.api.timeout.ms``); any other error is printed as Kafka's exception.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.server.kafka_config import parse_listener, parse_properties

if TYPE_CHECKING:
    from odradek.cli.metadata_quorum import _Admin

ADD_TIMEOUT_MS = 30_000  # the AddRaftVoter timeout_ms Kafka's Admin sends (its request timeout)


def _terse(message: str) -> Exception:
    from odradek.cli.metadata_quorum import TerseError

    return TerseError(message)


def _exception(code: int, message: str | None) -> str:
    from odradek.cli.admin import _ERRORS_PKG, kafka_exception

    if code == Errors.REQUEST_TIMED_OUT:
        return f"{_ERRORS_PKG}TimeoutException: {message}"
    return kafka_exception(code, message)


def controller_id(props: dict[str, str]) -> int:
    if "node.id" not in props:
        raise _terse("node.id not found in configuration file. Is this a valid controller configuration file?")
    node_id = int(props["node.id"])
    if node_id < 0:
        raise _terse("node.id was negative in configuration file. Is this a valid controller configuration file?")
    if "controller" not in props.get("process.roles", ""):
        raise _terse(
            "process.roles did not contain 'controller' in configuration file. Is this a valid "
            "controller configuration file?"
        )
    return node_id


def metadata_directory(props: dict[str, str]) -> str:
    if props.get("metadata.log.dir"):
        return props["metadata.log.dir"]
    dirs = [d for d in props.get("log.dirs", "").strip().split(",") if d]
    if dirs:
        return dirs[0]
    raise _terse(
        "Neither metadata.log.dir nor log.dirs were found. Is this a valid controller configuration file?"
    )


def metadata_directory_id(directory: str) -> str:
    path = os.path.join(directory, "meta.properties")
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except OSError:
        raise _terse(f"Unable to read meta.properties from {directory}") from None
    if not props.get("directory.id"):
        raise _terse(f"No directory id found in {directory}")
    return props["directory.id"]


def controller_endpoints(props: dict[str, str]) -> list[tuple[str, str, int]]:
    listeners = {}
    for key in ("listeners", "advertised.listeners"):
        for item in [x for x in props.get(key, "").split(",") if x.strip()]:
            lst = parse_listener(item.strip(), key)
            listeners[lst.name] = lst
    if "controller.listener.names" not in props:
        raise _terse("controller.listener.names was not found. Is this a valid controller configuration file?")
    out = []
    for name in props["controller.listener.names"].split(","):
        name = name.strip().upper()
        found = listeners.get(name)
        if found is None:
            raise _terse(f"Cannot find information about controller listener name: {name}")
        out.append((name, found.host or "localhost", found.port))
    return out


def parse_uuid(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"Invalid UUID string: {text}")
    return uuid.UUID(bytes=raw)


async def _send_to_active(admin: _Admin, call: str, api: Any, body: dict[str, Any]) -> None:
    deadline = time.monotonic() + admin.api_timeout_s
    while True:
        r = await admin._call(call, api, 0, body, admin._quorum_target)  # noqa: SLF001
        code = int(r["error_code"])
        if code == Errors.NONE:
            return
        if code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_CONTROLLER) and time.monotonic() < deadline:
            admin.active_controller = None  # ask again who leads
            await asyncio.sleep(0.1)
            continue
        raise _terse(_exception(code, r.get("error_message")))


async def add_controller(admin: _Admin, props: dict[str, str], dry_run: bool) -> str:
    node_id = controller_id(props)
    directory_id = metadata_directory_id(metadata_directory(props))
    endpoints = controller_endpoints(props)
    if not dry_run:
        body = {
            "cluster_id": None,
            "timeout_ms": ADD_TIMEOUT_MS,
            "voter_id": node_id,
            "voter_directory_id": parse_uuid(directory_id),
            "listeners": [{"name": n, "host": h, "port": p} for n, h, p in endpoints],
        }
        await _send_to_active(admin, "addRaftVoter", g.ADD_RAFT_VOTER, body)
    shown = ", ".join(f"{n}://{'[' + h + ']' if ':' in h else h}:{p}" for n, h, p in endpoints)
    verb = "DRY RUN of adding" if dry_run else "Added"
    return f"{verb} controller {node_id} with directory id {directory_id} and endpoints: {shown}\n"


async def remove_controller(admin: _Admin, node_id: int, directory: str, dry_run: bool) -> str:
    if node_id < 0:
        raise _terse(f"Invalid negative --controller-id: {node_id}")
    try:
        directory_id = parse_uuid(directory)
    except ValueError as e:
        raise _terse(f"Failed to parse --controller-directory-id: {e}") from None
    if not dry_run:
        body = {"cluster_id": None, "voter_id": node_id, "voter_directory_id": directory_id}
        await _send_to_active(admin, "removeRaftVoter", g.REMOVE_RAFT_VOTER, body)
    verb = "DRY RUN of removing " if dry_run else "Removed "
    return f"{verb} KRaft controller {node_id} with directory id {directory}\n"
