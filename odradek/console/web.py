"""The console's HTTP side: aiohttp handlers rendering jinja2 templates (autoescaped: topic names,
keys, values and headers come from the cluster and are untrusted), plus the lag sampler task.

A page whose requests fail (the cluster is away, a broker does not answer) is an error page with
status 503; the next load tries again. A Content-Security-Policy forbids scripts altogether.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web
from markupsafe import Markup

from odradek import __version__
from odradek.console.browse import DEFAULT_LIMIT, MAX_LIMIT, MAX_SHOWN_BYTES, browse
from odradek.console.client import ConsoleClient, ConsoleError
from odradek.console.cluster import list_topics, overview, topic_detail
from odradek.console.groups import describe_group, list_groups
from odradek.console.lag_history import LagHistory, lag_chart_svg

log = logging.getLogger(__name__)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'"
MAX_REFRESH_S = 3600
CLIENT_KEY: web.AppKey[ConsoleClient] = web.AppKey("client", ConsoleClient)
HISTORY_KEY: web.AppKey[LagHistory] = web.AppKey("history", LagHistory)
ENV_KEY: web.AppKey[jinja2.Environment] = web.AppKey("env", jinja2.Environment)


class BadRequest(Exception):
    pass


def format_ts(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    except (OverflowError, OSError, ValueError):
        return str(ms)


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 date-time (UTC unless it says otherwise)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"not a timestamp (epoch milliseconds or ISO 8601): {text}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _int(request: web.Request, name: str, default: int | None = None, lo: int | None = None) -> int | None:
    text = request.query.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {text!r}") from None
    if lo is not None and value < lo:
        raise BadRequest(f"{name} must be at least {lo}")
    return value


def _required(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if not value:
        raise BadRequest(f"missing query parameter {name}")
    return value


def make_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["ts"] = format_ts
    return env


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    env = request.app[ENV_KEY]
    client = request.app[CLIENT_KEY]
    refresh = _int(request, "refresh", None, 1)
    text = env.get_template(template).render(
        bootstrap=",".join(f"{h}:{p}" for h, p in client.bootstrap), version=__version__,
        refresh=min(refresh, MAX_REFRESH_S) if refresh else None, path=request.path_qs, **context,
    )
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except BadRequest as e:
        response = render(request, "error.html", 400, title="Bad request", message=str(e))
    except ConsoleError as e:
        log.info("%s: %s", request.path_qs, e)
        response = render(request, "error.html", 503, title="Cluster unavailable", message=str(e))
    except web.HTTPException:
        raise
    except Exception as e:
        log.exception("%s failed", request.path_qs)
        response = render(request, "error.html", 500, title="Console error", message=f"{type(e).__name__}: {e}")
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    return response


async def page_overview(request: web.Request) -> web.StreamResponse:
    info = await overview(request.app[CLIENT_KEY])
    return render(request, "overview.html", title="Overview", o=info)


async def page_topics(request: web.Request) -> web.StreamResponse:
    topics = await list_topics(request.app[CLIENT_KEY])
    return render(request, "topics.html", title="Topics", topics=topics)


async def page_topic(request: web.Request) -> web.StreamResponse:
    name = _required(request, "name")
    detail = await topic_detail(request.app[CLIENT_KEY], name)
    return render(request, "topic.html", title=f"Topic {name}", d=detail)


async def page_messages(request: web.Request) -> web.StreamResponse:
    topic = _required(request, "topic")
    partition = _int(request, "partition", 0, 0)
    assert partition is not None
    limit = _int(request, "limit", DEFAULT_LIMIT, 1)
    assert limit is not None
    offset = _int(request, "offset", None, 0)
    ts_text = request.query.get("timestamp", "").strip()
    timestamp = parse_timestamp(ts_text) if ts_text else None
    fmt = request.query.get("format", "text")
    if fmt not in ("text", "hex"):
        raise BadRequest("format is text or hex")
    result = await browse(request.app[CLIENT_KEY], topic, partition, offset=offset, timestamp=timestamp,
                          limit=min(limit, MAX_LIMIT))
    return render(request, "messages.html", title=f"Messages of {topic}-{partition}", r=result, fmt=fmt,
                  limit=min(limit, MAX_LIMIT), max_limit=MAX_LIMIT, offset=offset, timestamp=ts_text,
                  max_shown=MAX_SHOWN_BYTES)


async def page_groups(request: web.Request) -> web.StreamResponse:
    groups, errors = await list_groups(request.app[CLIENT_KEY])
    return render(request, "groups.html", title="Consumer groups", groups=groups, errors=errors)


async def page_group(request: web.Request) -> web.StreamResponse:
    group = _required(request, "id")
    history = request.app[HISTORY_KEY]
    detail = await describe_group(request.app[CLIENT_KEY], group)
    chart = Markup(lag_chart_svg(history.samples(group)))  # noqa: S704 - built with html.escape
    return render(request, "group.html", title=f"Group {group}", g=detail, chart=chart,
                  sampled=history.last_sample_s, sample_error=history.last_error)


async def health(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok\n")


def build_app(client: ConsoleClient, history: LagHistory, lag_interval_s: float) -> web.Application:
    app = web.Application(middlewares=[errors_middleware])
    app[CLIENT_KEY] = client
    app[HISTORY_KEY] = history
    app[ENV_KEY] = make_env()
    app.router.add_get("/", page_overview)
    app.router.add_get("/topics", page_topics)
    app.router.add_get("/topic", page_topic)
    app.router.add_get("/messages", page_messages)
    app.router.add_get("/groups", page_groups)
    app.router.add_get("/group", page_group)
    app.router.add_get("/healthz", health)

    async def sampler(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(history.run(client, lag_interval_s))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()

    app.cleanup_ctx.append(sampler)
    return app
