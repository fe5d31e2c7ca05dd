"""ssl.principal.mapping.rules as Kafka's SslPrincipalMapper parses and applies them (the cases of
Kafka's SslPrincipalMapperTest), and certificate subjects printed as Java's X500Principal does."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from odradek.security.ssl_principal_mapper import NoMatchingRule, SslPrincipalMapper, format_name


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError):
        SslPrincipalMapper(rules)


def test_mapping() -> None:
    mapper = SslPrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.get_name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.get_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.get_name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.get_name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.get_name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(("expected", "rules"), [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected: str, rules: str) -> None:
    assert repr(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.get_name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_no_rule_applies() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=Duke,OU=Users"):
        mapper.get_name("CN=Duke,OU=Users")


def test_back_reference_beyond_the_groups_is_literal() -> None:
    # Kafka (from NiFi): with one group, "$1@$2" keeps "$2" as text; "$12" is group 1 then "2".
    assert SslPrincipalMapper("RULE:^CN=(.*?),.*$/$1@$2/").get_name("CN=a,O=b") == "a@$2"
    assert SslPrincipalMapper("RULE:^CN=(.*?),.*$/$12/").get_name("CN=a,O=b") == "a2"


def test_java_rfc2253_names() -> None:
    name = x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Eng"),
        x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@x.io"),
    ])
    # Most specific first, special characters escaped, attributes without an RFC 2253 keyword
    # as OID=#<DER hex> (emailAddress is an IA5String: tag 0x16).
    assert format_name(name) == "1.2.840.113549.1.9.1=#16066140782e696f,CN=alice,OU=Eng,O=Acme\\, Inc,C=US"
