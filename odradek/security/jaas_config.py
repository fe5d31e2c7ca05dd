"""JaasConfig: Kafka's ``sasl.jaas.config`` values, parsed as Kafka's JaasConfig parses them.

A value is one or more login module entries, each ``<LoginModuleClass> <flag> [key=value ...];``
with the flag one of ``required``, ``requisite``, ``sufficient`` or ``optional``. Values are
either a bare word or a double-quoted string (``\\"`` and ``\\\\`` escape inside quotes, as Java's
StreamTokenizer reads them); ``//`` and ``/* */`` comments are skipped. Example::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

A malformed value raises :class:`JaasConfigError` naming what is wrong, never echoing values
(they hold passwords).
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class JaasConfigError(ValueError):
    """The JAAS configuration text cannot be parsed."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c in "._-$:@/+*#!?%&~^|<>[]{}()'`,"


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, value) tokens: kind is "word", "quoted", "=" or ";"."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise JaasConfigError("unterminated /* comment in the JAAS configuration")
            i = j + 2
        elif c in "=;":
            out.append((c, c))
            i += 1
        elif c == '"':
            i += 1
            buf: list[str] = []
            while True:
                if i >= n:
                    raise JaasConfigError("unterminated quoted value in the JAAS configuration")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                    continue
                if c == '"':
                    i += 1
                    break
                buf.append(c)
                i += 1
            out.append(("quoted", "".join(buf)))
        elif _is_word_char(c):
            j = i
            while j < n and _is_word_char(text[j]):
                j += 1
            out.append(("word", text[i:j]))
            i = j
        else:
            raise JaasConfigError(f"unexpected character {c!r} in the JAAS configuration")
    return out


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every login module entry of ``text`` (at least one)."""
    toks = _tokens(text)
    entries: list[JaasEntry] = []
    i = 0
    while i < len(toks):
        kind, module = toks[i]
        if kind != "word":
            raise JaasConfigError("a JAAS entry must start with a login module class name")
        if i + 1 >= len(toks) or toks[i + 1][0] != "word":
            raise JaasConfigError(f"login module {module}: the control flag is missing")
        flag = toks[i + 1][1].lower()
        if flag not in FLAGS:
            raise JaasConfigError(
                f"login module {module}: invalid control flag {toks[i + 1][1]!r} "
                f"(expected one of {', '.join(FLAGS)})"
            )
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(toks):
                raise JaasConfigError(f"login module {module}: the entry must end with ';'")
            kind, value = toks[i]
            if kind == ";":
                i += 1
                break
            if kind != "word":
                raise JaasConfigError(f"login module {module}: expected an option name")
            if i + 2 >= len(toks) or toks[i + 1][0] != "=" or toks[i + 2][0] not in ("word", "quoted"):
                raise JaasConfigError(f"login module {module}: option {value} must be name=value")
            options[value] = toks[i + 2][1]
            i += 3
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise JaasConfigError("the JAAS configuration holds no login module")
    return entries


def single_entry(text: str, expected_module: str | None = None) -> JaasEntry:
    """The one login module of a ``sasl.jaas.config`` value (Kafka allows exactly one there)."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(
            f"a sasl.jaas.config value must hold exactly one login module, it holds {len(entries)}"
        )
    entry = entries[0]
    if expected_module is not None and entry.login_module != expected_module:
        raise JaasConfigError(f"expected login module {expected_module}, got {entry.login_module}")
    return entry
