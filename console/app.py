"""The console's pages and actions (Starlette, server-rendered Jinja2 templates; a few lines
of script refresh the live parts without reloading)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from console.actions import ActionRefused, act
from console.auth import Credentials, csrf_ok, new_csrf_token
from console.views import LagHistory, redacted, svg_points
from replicator.check_report import CheckBusy, Report
from replicator.control import ComponentNodes
from replicator.requests import CheckRequest
from thl_topics.event import ThlEvent
from thl_topics.summary import ThlSummary
from trep.thl_format import format_event

log = logging.getLogger(__name__)
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


class Services(Protocol):
    """What the pages read (``registry.Registry``; a fake in unit tests)."""

    history: LagHistory

    def names(self) -> list[str]: ...

    def configured(self) -> list[str]: ...

    def groups(self, service: str) -> list[str]: ...

    def overview(self, service: str) -> dict[str, Any]: ...

    def nodes(self, service: str, component: str) -> ComponentNodes: ...

    def thl(self, service: str) -> ThlSummary | None: ...

    def events(self, service: str, seqno: int) -> list[ThlEvent]: ...

    def checks(self, service: str) -> tuple[CheckRequest | None, Report]: ...

    def start_check(self, service: str) -> CheckRequest: ...


def create_app(services: Services, credentials: Credentials, secret: str) -> Starlette:
    """The console over ``services``; ``secret`` signs the session cookies."""

    def page(request: Request, name: str, **context: Any) -> Response:
        session = request.session
        if "csrf" not in session:
            session["csrf"] = new_csrf_token()
        return TEMPLATES.TemplateResponse(request, name, {
            "user": session.get("user"), "csrf": session["csrf"],
            "can_login": credentials.any, "flash": session.pop("flash", None), **context})

    def index(request: Request) -> Response:
        # Live rows for the services the console was given; the others (ZooKeeper may
        # hold many) by name, each read when its page is opened.
        mine = services.configured()
        return page(request, "index.html",
                    services=[services.overview(s) for s in mine],
                    others=[s for s in services.names() if s not in mine])

    def services_fragment(request: Request) -> Response:
        return TEMPLATES.TemplateResponse(request, "services_table.html", {
            "services": [services.overview(s) for s in services.configured()]})

    def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    def known(request: Request) -> str:
        name = request.path_params["service"]
        if name not in services.names():
            raise _NotFound(f"no service {name!r}")
        return str(name)

    def service(request: Request) -> Response:
        name = known(request)
        view = services.overview(name)
        charts = {g: svg_points(services.history.of(f"{name}/{g}"))
                  for g in ["extractor", *view["consumers"]]}
        req, report = services.checks(name)
        return page(request, "service.html", view=view, charts=charts, check=req,
                    report=report)

    def thl(request: Request) -> Response:
        """The THL's range, epochs and size, and one seqno's events (values and statement
        text only for a logged-in user)."""
        name = known(request)
        raw = request.query_params.get("seqno", "").strip()
        seqno = int(raw) if raw.isdigit() else None
        events = services.events(name, seqno) if seqno is not None else []
        shown = events if request.session.get("user") else [redacted(e) for e in events]
        return page(request, "thl.html", service=name, summary=services.thl(name),
                    seqno=seqno, events=[format_event(e) for e in shown])

    async def check(request: Request) -> Response:
        name = known(request)
        refused = await _refused(request)
        if refused is not None:
            return refused
        try:
            req = services.start_check(name)
        except CheckBusy as exc:
            request.session["flash"] = f"not started: {exc}"
        else:
            logging.getLogger("console.audit").info(
                "user %s: check %s of service %s", request.session["user"], req.id, name)
            request.session["flash"] = f"check {req.id} requested"
        return RedirectResponse(f"/services/{name}", 303)

    def service_fragment(request: Request) -> Response:
        name = known(request)
        return TEMPLATES.TemplateResponse(request, "service_status.html",
                                          {"view": services.overview(name)})

    def service_json(request: Request) -> Response:
        return JSONResponse(services.overview(known(request)))

    async def login(request: Request) -> Response:
        form = await request.form()
        if not csrf_ok(request.session.get("csrf"), form.get("csrf")):
            return PlainTextResponse("refused: stale form, reload the page", 403)
        user = credentials.login(str(form.get("user", "")), str(form.get("password", "")))
        if user is None:
            log.warning("console: login refused for %r", form.get("user"))
            request.session["flash"] = "login refused"
        else:
            request.session["user"] = user
            request.session["csrf"] = new_csrf_token()  # a new session, a new token
            logging.getLogger("console.audit").info("user %s logged in", user)
        back = str(form.get("next") or "/")
        # Only a page of this console: never a redirect to another site.
        return RedirectResponse(back if back.startswith("/") and not back.startswith("//")
                                else "/", 303)

    async def logout(request: Request) -> Response:
        form = await request.form()
        if csrf_ok(request.session.get("csrf"), form.get("csrf")):
            request.session.clear()
        return RedirectResponse("/", 303)

    async def action(request: Request) -> Response:
        name = known(request)
        group = request.path_params["group"]
        refused = await _refused(request)
        if refused is not None:
            return refused
        form = await request.form()
        user = request.session["user"]
        if group not in services.groups(name):
            return PlainTextResponse(f"no group {group!r} in service {name}", 404)
        what = str(form.get("action", ""))
        try:
            act(services.nodes(name, f"consumers/{group}"), name, group, what,
                str(form.get("skip", "")), str(user))
        except ActionRefused as exc:
            request.session["flash"] = f"not sent: {exc}"
        else:
            request.session["flash"] = f"{what} requested for {group}"
        return RedirectResponse(f"/services/{name}", 303)

    app = Starlette(routes=[
        Route("/", index),
        Route("/health", health),
        Route("/fragments/services", services_fragment),
        Route("/services/{service}", service),
        Route("/fragments/services/{service}", service_fragment),
        Route("/api/services/{service}", service_json),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/services/{service}/groups/{group}/action", action, methods=["POST"]),
        Route("/services/{service}/thl", thl),
        Route("/services/{service}/check", check, methods=["POST"]),
    ], middleware=[Middleware(SessionMiddleware, secret_key=secret, same_site="strict",
                              https_only=False)],
        exception_handlers={_NotFound: _not_found})
    return app


class _NotFound(Exception):
    pass


async def _refused(request: Request) -> Response | None:
    """Why an action is refused (no login, a form without the session's CSRF token), or
    None."""
    if request.session.get("user") is None:
        return PlainTextResponse("refused: log in first", 403)
    form = await request.form()
    if not csrf_ok(request.session.get("csrf"), form.get("csrf")):
        return PlainTextResponse("refused: stale form, reload the page", 403)
    return None


async def _not_found(request: Request, exc: Exception) -> Response:
    return PlainTextResponse(str(exc), 404)
