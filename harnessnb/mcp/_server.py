"""``MCPServer``: how to reach one MCP tool server, as a value.

A stdio server is a command run in the command sandbox (``tools._sandbox``); an http
server is a Streamable HTTP URL. Header values and environment values are registered
with the scrubber (``rules._secrets``) when the value is made, and ``describe`` never
shows them: it is the command line, or the URL without its userinfo and query.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from ..rules._errors import ConfigError
from ..rules._secrets import register, register_header, scrub
from ..tools._protocol import Effect

__all__ = ["DEFAULT_TIMEOUT_S", "MCPServer", "checked_servers", "require_sdk"]

DEFAULT_TIMEOUT_S = 30.0
_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
_SPEC_NAME = re.compile(r"([A-Za-z0-9_-]{1,40})=(?!=)")
_PREFIXES = ("mcp-server-", "mcp_server_", "server-", "server_")
_EMPTY: Mapping[str, str] = MappingProxyType({})
# Programs that run a package named by their first argument: the package names the server.
_LAUNCHERS = frozenset({"npx", "uvx", "bunx", "pipx", "node", "deno"})


def require_sdk() -> None:
    """Raise ``ConfigError`` naming the extra when the ``mcp`` SDK is not installed."""
    try:  # ``mcp.client``: a folder named ``mcp`` on sys.path imports as ``mcp`` alone
        import mcp.client  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "MCP tool servers need the mcp SDK: pip install 'harnessnb[mcp]'"
        ) from exc


def _frozen(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping)) if mapping else _EMPTY


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"MCP server name {name!r}: expected 1-40 letters, digits, '_' or '-'")
    return name


def _strip(word: str) -> str:
    for prefix in _PREFIXES:
        if word.startswith(prefix) and len(word) > len(prefix):
            return word[len(prefix) :]
    return word


def _stdio_name(command: str, args: Sequence[str]) -> str:
    base = os.path.basename(command)
    # ``python -m mcp_server_git``: the module names it, not the interpreter.
    if base.startswith("python") and "-m" in args:
        at = list(args).index("-m")
        if at + 1 < len(args):
            base = args[at + 1].rpartition(".")[2]
    elif base in _LAUNCHERS:  # ``npx -y @modelcontextprotocol/server-filesystem``
        package = next((a for a in args if not a.startswith("-") and a != "run"), base)
        base = package.rpartition("/")[2].partition("@")[0] or base
    base = _strip(base.removesuffix(".py").removesuffix(".js"))
    return re.sub(r"[^A-Za-z0-9_-]", "_", base)[:40] or "server"


def _effects(effects: Mapping[str, Effect] | None) -> Mapping[str, Effect]:
    out: dict[str, Effect] = {}
    for tool, effect in (effects or {}).items():
        if not isinstance(effect, Effect):
            raise ConfigError(f"effects[{tool!r}]: expected hn.Effect, got {effect!r}")
        out[str(tool)] = effect
    return MappingProxyType(out)


def _timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigError(f"MCP server timeout {timeout!r}: expected seconds > 0")
    return float(timeout)


@dataclass(frozen=True)
class MCPServer:
    """One MCP tool server: made by ``MCPServer.stdio``, ``.http`` or ``.parse``.

    Fields: ``transport`` (``"stdio"`` or ``"http"``), ``name``, ``command``/``args``/
    ``env`` (stdio), ``url``/``headers`` (http), ``trusted`` (its tool annotations
    believed), ``effects`` (per-tool ``hn.Effect`` overrides), ``network`` (a stdio
    server may use the network when the policy allows it too), ``timeout_s`` (start
    and each request).
    """

    transport: Literal["stdio", "http"]
    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY, repr=False)
    url: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=lambda: _EMPTY, repr=False)
    trusted: bool = False
    effects: Mapping[str, Effect] = field(default_factory=lambda: MappingProxyType({}))
    network: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def stdio(
        cls,
        command: str,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        trusted: bool = False,
        effects: Mapping[str, Effect] | None = None,
        network: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> MCPServer:
        """A server started as ``command args...`` (in the command sandbox); ``env``
        is added to its minimal environment (values registered as secrets)."""
        if not isinstance(command, str) or not command.strip():
            raise ConfigError("MCPServer.stdio: command must be a non-empty string")
        if isinstance(args, str):
            raise ConfigError("MCPServer.stdio: args must be a sequence of strings, not one")
        words = tuple(str(a) for a in args)
        for value in (env or {}).values():
            register(value)
        return cls(
            transport="stdio",
            name=_check_name(name if name is not None else _stdio_name(command, words)),
            command=command,
            args=words,
            env=_frozen(env),
            trusted=bool(trusted),
            effects=_effects(effects),
            network=bool(network),
            timeout_s=_timeout(timeout_s),
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        trusted: bool = False,
        effects: Mapping[str, Effect] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> MCPServer:
        """A Streamable HTTP server at ``url``; credential-named header values are
        registered as secrets (and no header value is ever shown)."""
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"MCPServer.http: {scrub(str(url))!r} is not an http(s) URL")
        for key, value in (headers or {}).items():
            register(value)  # every header value: none is ever shown
            register_header(key, value)  # and a ``Bearer ...``'s credentials alone
        if parts.password:
            register(parts.password)
        default = re.sub(r"[^A-Za-z0-9_-]", "_", parts.hostname)[:40]
        return cls(
            transport="http",
            name=_check_name(name if name is not None else default),
            url=url,
            headers=_frozen(headers),
            trusted=bool(trusted),
            effects=_effects(effects),
            timeout_s=_timeout(timeout_s),
        )

    @classmethod
    def parse(cls, spec: str) -> MCPServer:
        """The faces' words: ``[NAME=]http(s)://...`` or ``[NAME=]command args...``."""
        text = spec.strip() if isinstance(spec, str) else ""
        name: str | None = None
        named = _SPEC_NAME.match(text)
        if named:
            name, text = named.group(1), text[named.end() :].strip()
        if not text:
            raise ConfigError(f"MCP server {spec!r}: expected a command or an http(s) URL")
        if text.lower().startswith(("http://", "https://")):
            return cls.http(text, name=name)
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise ConfigError(f"MCP server {spec!r}: {exc}") from exc
        return cls.stdio(words[0], args=words[1:], name=name)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as the keywords that make it (a sweep's servers travel to Dask
        workers): rebuilt by ``stdio``/``http``, so its env and header values are
        registered with the receiving process's scrubber too."""
        common = {
            "name": self.name,
            "trusted": self.trusted,
            "effects": dict(self.effects),
            "timeout_s": self.timeout_s,
        }
        if self.transport == "http":
            made = {"url": self.url, "headers": dict(self.headers), **common}
        else:
            made = {
                "command": self.command,
                "args": self.args,
                "env": dict(self.env),
                "network": self.network,
                **common,
            }
        return (_rebuilt, (self.transport, made))

    def describe(self) -> str:
        """What the store and cards show: the command line, or the URL without its
        userinfo and query; scrubbed. Header and environment values never appear."""
        if self.transport == "http":
            parts = urlsplit(self.url or "")
            host = parts.hostname or ""
            if ":" in host:
                host = f"[{host}]"
            netloc = f"{host}:{parts.port}" if parts.port else host
            return scrub(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
        return scrub(shlex.join([self.command or "", *self.args]))


def _rebuilt(transport: str, made: dict[str, Any]) -> MCPServer:
    """An unpickled ``MCPServer`` (``MCPServer.__reduce__``)."""
    return MCPServer.http(**made) if transport == "http" else MCPServer.stdio(**made)


def checked_servers(servers: Sequence[MCPServer], where: str) -> tuple[MCPServer, ...]:
    """``mcp=`` as a tuple of ``MCPServer``, or ConfigError (said by ``where``): not a
    sequence of servers, or two servers with one name (their tools would be confused)."""
    if isinstance(servers, MCPServer | str) or not isinstance(servers, Sequence):
        raise ConfigError(f"{where}: mcp must be a list of hn.MCPServer, not {servers!r}")
    given = tuple(servers)
    for server in given:
        if not isinstance(server, MCPServer):
            raise ConfigError(
                f"{where}: mcp holds {type(server).__name__} {server!r}; expected "
                "hn.MCPServer (MCPServer.stdio, .http or .parse)"
            )
    names = [s.name for s in given]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(
            f"{where}: two MCP servers are named {twice[0]!r}; give one another name "
            "(name=..., or NAME=COMMAND in the faces' --mcp)"
        )
    return given
