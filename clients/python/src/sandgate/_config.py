"""Where the gateway and the credential come from, as the ``sandgate`` CLI resolves them.

The gateway: the ``url`` argument, else ``$SANDGATE_URL``, else the gateway of the last
``sandgate login``, else ``http://localhost:8080`` (where ``make run`` listens).

The credential: the ``token`` / ``api_key`` argument, else ``$SANDGATE_TOKEN``, else
``$SANDGATE_API_KEY`` (both variables set is refused: which one was meant is a guess),
else the token ``sandgate login`` cached for that gateway in
``<user config dir>/sandgate/credentials.json`` (cmd/sandgate/credentials.go), refreshed with
its refresh token when it is within a minute of expiring and saved back.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import httpx

from ._errors import ConfigurationError

DEFAULT_URL = "http://localhost:8080"
API_KEY_PREFIX = "sgk_"
EXPIRY_MARGIN_S = 60.0


def config_dir() -> Path:
    """Go's os.UserConfigDir()/sandgate for this platform."""
    if sys.platform == "win32":
        base = os.environ.get("AppData") or str(Path.home() / "AppData" / "Roaming")
    elif sys.platform == "darwin":
        base = str(Path.home() / "Library" / "Application Support")
    else:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sandgate"


def credentials_path() -> Path:
    return config_dir() / "credentials.json"


def _load_store() -> dict[str, Any]:
    try:
        data = json.loads(credentials_path().read_text())
    except FileNotFoundError:
        return {"servers": {}}
    except (OSError, ValueError) as e:
        raise ConfigurationError(f"token cache {credentials_path()}: {e} (delete it and sign in again with `sandgate login`)") from e
    if not isinstance(data, dict):
        raise ConfigurationError(f"token cache {credentials_path()} is not a JSON object (delete it and sign in again)")
    data.setdefault("servers", {})
    return data


def _save_store(store: dict[str, Any]) -> None:
    d = config_dir()
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".credentials-", dir=d)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(store, indent=2) + "\n")
        os.replace(tmp, d / "credentials.json")
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def normalize_url(url: str) -> str:
    """An absolute http(s) URL without a trailing slash (one gateway, one cache key)."""
    u = httpx.URL(url.rstrip("/"))
    if u.scheme not in ("http", "https") or not u.host:
        raise ConfigurationError(f"the gateway URL {url!r} is not an absolute http(s) URL")
    return str(u).rstrip("/")


def resolve_url(url: str | None) -> str:
    if not url:
        url = os.environ.get("SANDGATE_URL", "").strip()
    if not url:
        try:
            url = str(_load_store().get("current") or "")
        except ConfigurationError:
            url = ""
    return normalize_url(url or DEFAULT_URL)


def _parse_time(s: str) -> float:
    if not s:
        return 0.0
    # Go writes RFC 3339 with nanoseconds; Python takes at most microseconds.
    s = s.replace("Z", "+00:00")
    if "." in s:
        head, rest = s.split(".", 1)
        frac = "".join(ch for ch in rest if ch.isdigit())
        tz = rest[len(frac):]
        s = f"{head}.{frac[:6]}{tz}"
    try:
        return datetime.fromisoformat(s).timestamp()
    except ValueError:
        return 0.0


def _format_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _jwt_exp(token: str) -> float | None:
    """The exp claim of a JWT, unverified: only to know when to refresh (the gateway verifies)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        exp = claims.get("exp")
        return float(exp) if isinstance(exp, (int, float)) else None
    except (ValueError, TypeError):
        return None


class CachedLogin:
    """The bearer token of one gateway from the CLI's token cache, refreshed when due."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._lock = threading.Lock()
        self._bearer = ""
        self._expiry = 0.0

    def token(self) -> str:
        with self._lock:
            if self._bearer and self._expiry - time.time() > EXPIRY_MARGIN_S:
                return self._bearer
            store = _load_store()
            si = store["servers"].get(self.server)
            if not si or not si.get("bearer"):
                raise ConfigurationError(
                    f"not signed in to {self.server}: run `sandgate login`, or set SANDGATE_TOKEN or SANDGATE_API_KEY"
                )
            expiry = _parse_time(si.get("expiry", ""))
            if expiry - time.time() <= EXPIRY_MARGIN_S:
                if not si.get("refresh_token"):
                    raise ConfigurationError(f"the sign-in to {self.server} expired: run `sandgate login`")
                self._refresh(si)
                _save_store(store)
                expiry = _parse_time(si["expiry"])
            self._bearer, self._expiry = si["bearer"], expiry
            return self._bearer

    @staticmethod
    def _refresh(si: dict[str, Any]) -> None:
        """RFC 6749 §6 with a public client (client_id in the form), as the CLI does."""
        form = {"grant_type": "refresh_token", "refresh_token": si["refresh_token"], "client_id": si.get("client_id", "")}
        if si.get("scopes"):
            form["scope"] = " ".join(si["scopes"])
        try:
            r = httpx.post(si["token_url"], data=form, timeout=30)
        except httpx.HTTPError as e:
            raise ConfigurationError(f"the sign-in expired and could not be refreshed ({e}): run `sandgate login`") from e
        if r.status_code != 200:
            raise ConfigurationError(f"the sign-in expired and the issuer refused the refresh ({r.status_code}): run `sandgate login`")
        tok = r.json()
        bearer = tok.get("id_token") or tok.get("access_token")
        if not bearer:
            raise ConfigurationError("the issuer answered no token: run `sandgate login`")
        si["bearer"] = bearer
        if tok.get("refresh_token"):
            si["refresh_token"] = tok["refresh_token"]
        expiry = time.time() + float(tok["expires_in"]) if tok.get("expires_in") else 0.0
        exp = _jwt_exp(bearer)
        if exp and (not expiry or exp < expiry):
            expiry = exp
        si["expiry"] = _format_time(expiry or time.time() + 3600)


@dataclass
class Credentials:
    """A gateway and how to authenticate to it: ``token()`` answers the bearer to send."""

    url: str
    token: Callable[[], str]


def resolve(url: str | None = None, token: str | None = None, api_key: str | None = None) -> Credentials:
    """The gateway and credential, resolved as the module docstring says."""
    server = resolve_url(url)
    if token and api_key:
        raise ConfigurationError("pass token or api_key, not both")
    if not token and not api_key:
        env_token = os.environ.get("SANDGATE_TOKEN", "").strip()
        env_key = os.environ.get("SANDGATE_API_KEY", "").strip()
        if env_token and env_key:
            raise ConfigurationError(
                "both SANDGATE_TOKEN and SANDGATE_API_KEY are set: unset the one you do not mean to use (or pass token=)"
            )
        token, api_key = env_token or None, env_key or None
    if api_key:
        if not api_key.startswith(API_KEY_PREFIX):
            raise ConfigurationError(
                f"the API key does not start with {API_KEY_PREFIX!r} ('sandgate keys create' makes one); for an OIDC token use SANDGATE_TOKEN"
            )
        key = api_key
        return Credentials(server, lambda: key)
    if token:
        tok = token
        return Credentials(server, lambda: tok)
    return Credentials(server, CachedLogin(server).token)
