"""The HTTP clients. ``Client`` and ``AsyncClient`` mirror each other method for method.

Only reads are retried: a POST that timed out may have been stored, and
submitting it again would run the action twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import httpx

from tangram_client.models import Action, ScoringError, TangramError, Tenant

#: Largest body ``POST /api/v1/actions`` accepts.
BULK_LIMIT = 1000
#: Longest ``?wait=`` the server honours.
MAX_WAIT_S = 60
RETRY_STATUSES = frozenset({500, 502, 503, 504})
API = "/api/v1"


def _error_from(response: httpx.Response) -> TangramError:
    detail = response.reason_phrase or "error"
    errors: dict[str, list[str]] = {}
    try:
        body = response.json()
    except ValueError:
        if response.text:
            detail = response.text[:500]
    else:
        if isinstance(body, dict):
            detail = str(body.get("detail") or detail)
            raw_errors = body.get("errors") or {}
            if isinstance(raw_errors, dict):
                errors = {
                    str(k): [str(m) for m in (v if isinstance(v, list) else [v])]
                    for k, v in raw_errors.items()
                }
    return TangramError(response.status_code, detail, errors)


def _backoff(attempt: int, response: httpx.Response | None) -> float:
    if response is not None:
        retry_after = response.headers.get("Retry-After", "")
        if retry_after.isdigit():
            return min(float(retry_after), 30.0)
    return min(5.0, 0.2 * 2.0**attempt) * random.uniform(0.5, 1.0)


def _action_body(
    type: str, payload: Mapping[str, Any] | None, fields: Mapping[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type, "payload": dict(payload or {})}
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


def _scoring(
    code: str,
    samples: Sequence[Any],
    files: Mapping[str, str] | None,
    batch_key: str | None,
    batch_limit: int,
    fields: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """One ``reward.python`` call per sample, batched by default under the scorer's digest."""
    payload: dict[str, Any] = {"code": code, **({"files": dict(files)} if files else {})}
    if batch_key is None:
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        batch_key = f"reward.python:{digest[:32]}"
    return [
        {
            "type": "reward.python",
            "payload": {**payload, "sample": sample},
            "batch_key": batch_key,
            "batch_limit": batch_limit,
            **fields,
        }
        for sample in samples
    ]


def _scores(actions: list[Action]) -> list[Any]:
    failed = [action for action in actions if not action.ok]
    if failed:
        raise ScoringError(failed, len(actions))
    return [json.loads(action.stdout) for action in actions]


def _chunks(actions: Iterable[Mapping[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for action in actions:
        chunk.append(dict(action))
        if len(chunk) == BULK_LIMIT:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _offset_errors(error: TangramError, offset: int, submitted: list[Action]) -> TangramError:
    """Make a chunk's item indices (``"3.demand"``) indices into the caller's whole list."""
    errors = {}
    for path, messages in error.errors.items():
        head, sep, rest = path.partition(".")
        errors[f"{int(head) + offset}{sep}{rest}" if head.isdigit() else path] = messages
    return TangramError(error.status, error.detail, errors, submitted)


def _wait_step(deadline: float | None) -> int:
    """Seconds for the next ``?wait=``; raises nothing, <= 0 means the time is up."""
    if deadline is None:
        return MAX_WAIT_S
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return 0
    return max(1, min(MAX_WAIT_S, math.ceil(remaining)))


def _timeout_error(action: Action, timeout: float | None) -> TimeoutError:
    return TimeoutError(f"action {action.id} is still {action.state} after {timeout:g} s")


class _Settings:
    def __init__(self, base_url: str, token: str, timeout: float, retries: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self.timeout = timeout
        self.retries = retries


class Client:
    """Blocking client. ``timeout`` bounds each request (long polls get their wait on top)."""

    def __init__(
        self, base_url: str, token: str, *, timeout: float = 30.0, retries: int = 4
    ) -> None:
        self._settings = _Settings(base_url, token, timeout, retries)
        self._http = httpx.Client(
            base_url=self._settings.base_url, headers=self._settings.headers, timeout=timeout
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        extra_timeout: float = 0.0,
    ) -> Any:
        retries = self._settings.retries if method == "GET" else 0
        for attempt in range(retries + 1):
            response = None
            try:
                response = self._http.request(
                    method,
                    url,
                    json=json,
                    params=params,
                    timeout=self._settings.timeout + extra_timeout,
                )
            except httpx.TransportError as exc:
                if attempt == retries:
                    raise TangramError(None, f"{method} {url}: {exc!r}") from exc
            else:
                if response.status_code not in RETRY_STATUSES or attempt == retries:
                    if response.is_error:
                        raise _error_from(response)
                    return response.json()
            time.sleep(_backoff(attempt, response))
        raise AssertionError("unreachable")

    def submit(self, type: str, payload: Mapping[str, Any] | None = None, **fields: Any) -> Action:
        """Submit one action: ``job``, ``trajectory``, ``demand``, ``priority``,
        ``timeout_s``, ``duration_hint_s``, ``remaining_hint_s``, ``setup_hint_s`` go
        in ``fields``."""
        return Action.from_json(
            self._request("POST", f"{API}/actions", json=_action_body(type, payload, fields))
        )

    def submit_many(self, actions: Iterable[Mapping[str, Any]]) -> list[Action]:
        """Submit action dicts (each with ``type``) in bulk, in order, 1000 per request."""
        submitted: list[Action] = []
        for chunk in _chunks(actions):
            try:
                body = self._request("POST", f"{API}/actions", json=chunk)
            except TangramError as exc:
                raise _offset_errors(exc, len(submitted), submitted) from exc
            submitted.extend(Action.from_json(a) for a in body)
        return submitted

    def get(self, action_id: str, *, wait: int = 0) -> Action:
        params = {"wait": wait} if wait else None
        return Action.from_json(
            self._request("GET", f"{API}/actions/{action_id}", params=params, extra_timeout=wait)
        )

    def wait(self, action_id: str, timeout: float | None = None) -> Action:
        """Long-poll until the action is terminal; ``TimeoutError`` after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = _wait_step(deadline)
            action = self.get(action_id, wait=step) if step else self.get(action_id)
            if action.done:
                return action
            if not step or _wait_step(deadline) == 0:
                raise _timeout_error(action, timeout)

    def wait_all(self, action_ids: Iterable[str], timeout: float | None = None) -> list[Action]:
        """Wait for every action (one shared deadline), in the given order."""
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for action_id in action_ids:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            results.append(self.wait(action_id, left))
        return results

    def run(
        self,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        wait_timeout: float | None = None,
        **fields: Any,
    ) -> Action:
        """Submit and wait: the one-call way to run one action (``score`` scores samples)."""
        return self.wait(self.submit(type, payload, **fields).id, wait_timeout)

    def score(
        self,
        code: str,
        samples: Sequence[Any],
        *,
        files: Mapping[str, str] | None = None,
        batch_key: str | None = None,
        batch_limit: int = 64,
        wait_timeout: float | None = None,
        **fields: Any,
    ) -> list[Any]:
        """Score ``samples`` with ``score(samples)`` from ``code`` (``reward.python``):
        one call per sample, which the scheduler batches (by default per scorer) and
        the agent scores a batch at a time, keeping the scorer loaded for the next
        calls (its module-level setup, a model, runs once per node and GPU set, not
        per batch). The scores, in order; ``ScoringError``
        if any sample was not scored. ``demand``, ``job``, ``timeout_s`` ... go in ``fields``.
        """
        specs = _scoring(code, samples, files, batch_key, batch_limit, fields)
        calls = self.submit_many(specs)
        return _scores(self.wait_all([call.id for call in calls], wait_timeout))

    def cancel(self, action_id: str) -> Action:
        """Cancel a queued or running action; a 409 ``TangramError`` if it already ended."""
        return Action.from_json(self._request("POST", f"{API}/actions/{action_id}/cancel"))

    def list(self, **filters: Any) -> Iterator[Action]:
        """Iterate over actions matching ``job``, ``trajectory``, ``state``, ``type``,
        fetching pages (of ``limit``) as needed."""
        url: str | None = f"{API}/actions"
        params: Mapping[str, Any] | None = {k: v for k, v in filters.items() if v is not None}
        while url:
            page = self._request("GET", url, params=params)
            yield from (Action.from_json(a) for a in page["results"])
            url, params = page.get("next"), None

    def me(self) -> Tenant:
        return Tenant.from_json(self._request("GET", f"{API}/tenants/me"))


class AsyncClient:
    """The asyncio twin of :class:`Client`; ``wait_all`` waits concurrently."""

    def __init__(
        self, base_url: str, token: str, *, timeout: float = 30.0, retries: int = 4
    ) -> None:
        self._settings = _Settings(base_url, token, timeout, retries)
        self._http = httpx.AsyncClient(
            base_url=self._settings.base_url, headers=self._settings.headers, timeout=timeout
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        extra_timeout: float = 0.0,
    ) -> Any:
        retries = self._settings.retries if method == "GET" else 0
        for attempt in range(retries + 1):
            response = None
            try:
                response = await self._http.request(
                    method,
                    url,
                    json=json,
                    params=params,
                    timeout=self._settings.timeout + extra_timeout,
                )
            except httpx.TransportError as exc:
                if attempt == retries:
                    raise TangramError(None, f"{method} {url}: {exc!r}") from exc
            else:
                if response.status_code not in RETRY_STATUSES or attempt == retries:
                    if response.is_error:
                        raise _error_from(response)
                    return response.json()
            await asyncio.sleep(_backoff(attempt, response))
        raise AssertionError("unreachable")

    async def submit(
        self, type: str, payload: Mapping[str, Any] | None = None, **fields: Any
    ) -> Action:
        return Action.from_json(
            await self._request("POST", f"{API}/actions", json=_action_body(type, payload, fields))
        )

    async def submit_many(self, actions: Iterable[Mapping[str, Any]]) -> list[Action]:
        submitted: list[Action] = []
        for chunk in _chunks(actions):
            try:
                body = await self._request("POST", f"{API}/actions", json=chunk)
            except TangramError as exc:
                raise _offset_errors(exc, len(submitted), submitted) from exc
            submitted.extend(Action.from_json(a) for a in body)
        return submitted

    async def get(self, action_id: str, *, wait: int = 0) -> Action:
        params = {"wait": wait} if wait else None
        return Action.from_json(
            await self._request(
                "GET", f"{API}/actions/{action_id}", params=params, extra_timeout=wait
            )
        )

    async def wait(self, action_id: str, timeout: float | None = None) -> Action:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = _wait_step(deadline)
            action = await (self.get(action_id, wait=step) if step else self.get(action_id))
            if action.done:
                return action
            if not step or _wait_step(deadline) == 0:
                raise _timeout_error(action, timeout)

    async def wait_all(
        self, action_ids: Iterable[str], timeout: float | None = None
    ) -> list[Action]:
        """Wait for all concurrently (one long poll each); results in the given order."""
        return list(await asyncio.gather(*(self.wait(a, timeout) for a in action_ids)))

    async def run(
        self,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        wait_timeout: float | None = None,
        **fields: Any,
    ) -> Action:
        action = await self.submit(type, payload, **fields)
        return await self.wait(action.id, wait_timeout)

    async def score(
        self,
        code: str,
        samples: Sequence[Any],
        *,
        files: Mapping[str, str] | None = None,
        batch_key: str | None = None,
        batch_limit: int = 64,
        wait_timeout: float | None = None,
        **fields: Any,
    ) -> list[Any]:
        specs = _scoring(code, samples, files, batch_key, batch_limit, fields)
        calls = await self.submit_many(specs)
        return _scores(await self.wait_all([call.id for call in calls], wait_timeout))

    async def cancel(self, action_id: str) -> Action:
        return Action.from_json(await self._request("POST", f"{API}/actions/{action_id}/cancel"))

    async def list(self, **filters: Any) -> AsyncIterator[Action]:
        url: str | None = f"{API}/actions"
        params: Mapping[str, Any] | None = {k: v for k, v in filters.items() if v is not None}
        while url:
            page = await self._request("GET", url, params=params)
            for item in page["results"]:
                yield Action.from_json(item)
            url, params = page.get("next"), None

    async def me(self) -> Tenant:
        return Tenant.from_json(await self._request("GET", f"{API}/tenants/me"))
