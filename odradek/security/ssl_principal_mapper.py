"""SslPrincipalMapper: the principal name of a TLS client certificate (``ssl.principal.mapping.rules``).

Kafka names an SSL client ``User:<name>`` where ``<name>`` is the certificate's subject
distinguished name as Java prints it (RFC 2253, most specific first: ``CN=alice,OU=eng,O=acme``),
passed through the mapping rules: a comma-separated list of ``DEFAULT`` (the DN unchanged) and
``RULE:<regex>/<replacement>/[L|U]`` entries, tried in order; the first rule whose regex matches
the whole DN gives the name (the replacement with ``$1``-style group references, lower- or
upper-cased with ``L``/``U``). A DN no rule matches fails the connection (Kafka's NoMatchingRule).

:func:`distinguished_name` renders a certificate subject the way Java's
``X500Principal.getName()`` does, so that rules written for Kafka match the same strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

DEFAULT_SSL_PRINCIPAL_MAPPING_RULES = "DEFAULT"

# Kafka's grammar (SslPrincipalMapper.RULE_PATTERN), in Python's regex syntax.
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(Exception):
    """No rule applies to a distinguished name."""


@dataclass(frozen=True)
class _Rule:
    is_default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    to_lower: bool = False
    to_upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        assert self.pattern is not None
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        groups = self.pattern.groups
        replacement = _escape_literal_back_references(self.replacement, groups)
        result = self.pattern.sub(lambda match: _java_replacement(match, replacement, groups), dn)
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        assert self.pattern is not None
        case = "/L" if self.to_lower else "/U" if self.to_upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{case}"


def _escape_literal_back_references(value: str, groups: int) -> str:
    """Kafka's rule: a ``$n`` naming a group the pattern does not have is a literal ``$n``
    (after shortening ``$123`` to ``$12`` or ``$1`` where those groups exist)."""
    if groups == 0:
        return value
    out = value
    for m in list(_BACK_REFERENCE.finditer(value)):
        digits = m.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            # Escape this "$" (positions shift by the escapes added before it).
            shift = len(out) - len(value)
            start = m.start() + shift
            out = out[:start] + "\\" + out[start:]
    return out


def _java_replacement(match: re.Match[str], replacement: str, groups: int) -> str:
    """Expand a java.util.regex replacement string (``$n`` groups, ``\\x`` literal x)."""
    out: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\":
            i += 1
            if i >= n:
                raise ValueError("character to be escaped is missing")
            out.append(replacement[i])
            i += 1
        elif c == "$":
            i += 1
            if i >= n or not replacement[i].isdigit():
                raise ValueError(f"illegal group reference in replacement {replacement!r}")
            ref = int(replacement[i])
            if ref > groups:
                raise ValueError(f"no group {ref} in replacement {replacement!r}")
            i += 1
            while i < n and replacement[i].isdigit():
                longer = ref * 10 + int(replacement[i])
                if longer > groups:
                    break
                ref = longer
                i += 1
            out.append(match.group(ref) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _split_rules(rules: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip()) if m.group(0)]


def _parse_rules(rules: list[str]) -> list[_Rule]:
    out: list[_Rule] = []
    for rule in rules:
        m = _RULE_PARSER.match(rule)
        if m is None:
            raise ValueError(f"Invalid rule: {rule}")
        if m.end() != len(rule):
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end():]}`")
        if m.group(1) is not None:
            out.append(_Rule(True))
        elif m.group(2) is not None:
            try:
                pattern = re.compile(m.group(2))
            except re.error as e:
                raise ValueError(f"Invalid rule: `{rule}`: bad regular expression ({e})") from e
            out.append(_Rule(False, pattern, m.group(4), m.group(6) == "L", m.group(6) == "U"))
        elif m.group(7):
            raise ValueError(f"Invalid rule: {rule}")
    return out


class SslPrincipalMapper:
    def __init__(self, rules: str | None = None) -> None:
        """``rules``: the value of ``ssl.principal.mapping.rules`` (None: ``DEFAULT``); a
        ValueError names a rule that does not parse."""
        self.rules = _parse_rules(_split_rules(rules if rules is not None else DEFAULT_SSL_PRINCIPAL_MAPPING_RULES))

    def get_name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]")

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


# The attribute keywords Java's RFC 2253 form uses; other attributes print as OID=#<hex DER>.
_RFC2253_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
_SPECIAL = set(',+"\\<>;')


def _escape(value: str) -> str:
    out = []
    for i, c in enumerate(value):
        if c in _SPECIAL or (i == 0 and c in "# ") or (i == len(value) - 1 and c == " "):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def _der_value(attr: x509.NameAttribute) -> str:
    """``#`` and the hex of the value's DER encoding (tag, length, bytes)."""
    raw = attr.value if isinstance(attr.value, bytes) else attr.value.encode("utf-8")
    tag = getattr(getattr(attr, "_type", None), "value", 12)  # UTF8String unless known
    n = len(raw)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    return "#" + (bytes([tag]) + length + raw).hex()


def format_name(name: x509.Name) -> str:
    """``name`` in RFC 2253 form as Java's ``X500Principal.getName()`` prints it."""
    rdns = []
    for rdn in reversed(list(name.rdns)):
        parts = []
        for attr in rdn:
            keyword = _RFC2253_KEYWORDS.get(attr.oid)
            if keyword is not None and isinstance(attr.value, str):
                parts.append(f"{keyword}={_escape(attr.value)}")
            else:
                parts.append(f"{attr.oid.dotted_string}={_der_value(attr)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def distinguished_name(cert_der: bytes) -> str:
    """The subject DN of a DER certificate, as Kafka sees it."""
    return format_name(x509.load_der_x509_certificate(cert_der).subject)
